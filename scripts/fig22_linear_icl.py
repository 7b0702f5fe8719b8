"""Regenerate figures/fig22_linear_icl.png (code: scripts/gallery/fig22_linear_icl.py).

Usage: python scripts/fig22_linear_icl.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "linear_icl", *sys.argv[1:]]))
