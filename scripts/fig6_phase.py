"""Regenerate figures/fig6_phase*.png (code: scripts/gallery/fig6_phase.py).

Usage: python scripts/fig6_phase.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "phase", *sys.argv[1:]]))
