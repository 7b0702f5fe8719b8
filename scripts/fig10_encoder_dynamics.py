"""Regenerate figures/fig10_encoder_dynamics*.png (code: scripts/gallery/fig10_encoder_dynamics.py).

Usage: python scripts/fig10_encoder_dynamics.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "encoder_dynamics", *sys.argv[1:]]))
