"""Regenerate figures/fig12_real*.png and the Table-2 analog
figures/fig12_real_table.csv (code: scripts/gallery/fig12_real.py; needs
``pip install '.[real]'`` for scikit-learn's digits).

Usage: python scripts/fig12_real.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "real", *sys.argv[1:]]))
