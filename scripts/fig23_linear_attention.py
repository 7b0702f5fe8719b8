"""Regenerate figures/fig23_linear_attention.png (code: scripts/gallery/fig23_linear_attention.py).

Usage: python scripts/fig23_linear_attention.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "linear_attention", *sys.argv[1:]]))
