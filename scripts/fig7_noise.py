"""Regenerate figures/fig7_noise*.png (code: attnsim/figures/fig7_noise.py).

Usage: python scripts/fig7_noise.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

sys.exit(main(["figures", "noise", *sys.argv[1:]]))
