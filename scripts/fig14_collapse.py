"""Regenerate figures/fig14_collapse*.png (code: scripts/gallery/fig14_collapse.py).

Usage: python scripts/fig14_collapse.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "collapse", *sys.argv[1:]]))
