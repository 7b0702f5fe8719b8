"""Regenerate figures/fig5_delayed*.png (code: scripts/gallery/fig5_delayed.py).

Usage: python scripts/fig5_delayed.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "delayed", *sys.argv[1:]]))
