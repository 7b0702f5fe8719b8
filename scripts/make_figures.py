"""Regenerate every figure into figures/ (cached sweep records in sweeps/figures
are reused). Usage: python scripts/make_figures.py [--quick] [--outdir DIR]"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", *sys.argv[1:]]))
