"""Regenerate figures/fig21_single_location.png (code: scripts/gallery/fig21_single_location.py).

Usage: python scripts/fig21_single_location.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "single_location", *sys.argv[1:]]))
