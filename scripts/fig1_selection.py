"""Regenerate figures/fig1_selection*.png (code: scripts/gallery/fig1_selection.py).

Usage: python scripts/fig1_selection.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "selection", *sys.argv[1:]]))
