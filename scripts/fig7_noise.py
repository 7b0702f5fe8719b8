"""Regenerate figures/fig7_noise*.png (code: scripts/gallery/fig7_noise.py).

Usage: python scripts/fig7_noise.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "noise", *sys.argv[1:]]))
