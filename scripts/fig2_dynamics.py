"""Regenerate figures/fig2_dynamics*.png (code: scripts/gallery/fig2_dynamics.py).

Usage: python scripts/fig2_dynamics.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "dynamics", *sys.argv[1:]]))
