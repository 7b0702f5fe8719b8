"""Regenerate figures/fig8_generalization_time*.png (code: scripts/gallery/fig8_generalization_time.py).

Usage: python scripts/fig8_generalization_time.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "generalization_time", *sys.argv[1:]]))
