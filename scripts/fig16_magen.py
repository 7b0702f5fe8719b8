"""Regenerate figures/fig16_magen*.png (code: scripts/gallery/fig16_magen.py).

Usage: python scripts/fig16_magen.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "magen", *sys.argv[1:]]))
