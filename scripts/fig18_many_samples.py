"""Regenerate figures/fig18_many_samples*.png (code: scripts/gallery/fig18_many_samples.py).

Usage: python scripts/fig18_many_samples.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "many_samples", *sys.argv[1:]]))
