"""Regenerate figures/fig6_phase*.png (code: attnsim/figures/fig6_phase.py).

Usage: python scripts/fig6_phase.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

sys.exit(main(["figures", "phase", *sys.argv[1:]]))
