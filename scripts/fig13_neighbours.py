"""Regenerate figures/fig13_neighbours*.png (code: scripts/gallery/fig13_neighbours.py).

Usage: python scripts/fig13_neighbours.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "neighbours", *sys.argv[1:]]))
