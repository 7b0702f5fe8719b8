"""Regenerate figures/fig9_limit*.png (code: scripts/gallery/fig18_many_samples.py).

Usage: python scripts/fig9_limit.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "limit", *sys.argv[1:]]))
