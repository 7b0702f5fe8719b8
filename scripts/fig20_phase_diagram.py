"""Regenerate figures/fig20_phase_diagram*.png (code: scripts/gallery/fig20_phase_diagram.py).

Usage: python scripts/fig20_phase_diagram.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "phase_diagram", *sys.argv[1:]]))
