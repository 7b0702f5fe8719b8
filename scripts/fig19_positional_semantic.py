"""Regenerate figures/fig19_positional_semantic*.png (code: scripts/gallery/fig19_positional_semantic.py).

Usage: python scripts/fig19_positional_semantic.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "positional_semantic", *sys.argv[1:]]))
