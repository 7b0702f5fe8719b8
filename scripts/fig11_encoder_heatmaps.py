"""Regenerate figures/fig11_encoder_heatmaps*.png (code: scripts/gallery/fig11_encoder_heatmaps.py).

Usage: python scripts/fig11_encoder_heatmaps.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "encoder_heatmaps", *sys.argv[1:]]))
