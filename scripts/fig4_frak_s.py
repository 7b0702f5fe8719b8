"""Regenerate figures/fig4_frak_s*.png (code: scripts/gallery/fig4_frak_s.py).

Usage: python scripts/fig4_frak_s.py [--quick] [--outdir DIR]
"""

import sys

from attnsim.cli import main

if __name__ == "__main__":  # spawned sweep workers re-import this file
    sys.exit(main(["figures", "frak_s", *sys.argv[1:]]))
