"""Regenerate figures/fig3_heatmaps*.png (code: scripts/gallery/fig3_heatmaps.py).

Usage: python scripts/fig3_heatmaps.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "heatmaps", *sys.argv[1:]]))
