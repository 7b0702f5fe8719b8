"""Regenerate figures/fig2_dynamics*.png (code: attnsim/figures/fig2_dynamics.py).

Usage: python scripts/fig2_dynamics.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

sys.exit(main(["figures", "dynamics", *sys.argv[1:]]))
