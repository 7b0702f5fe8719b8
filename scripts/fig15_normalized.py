"""Regenerate figures/fig15_normalized*.png (code: scripts/gallery/fig15_normalized.py).

Usage: python scripts/fig15_normalized.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "normalized", *sys.argv[1:]]))
