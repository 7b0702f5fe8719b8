"""Compilation flags shared by every kernel module.

numba's cache key holds a function's own bytecode, not these flags: after
changing one, delete the ``__pycache__`` folders of ``attnsim/kernels``.
"""

CACHE = True  # cold compilation takes 4-15 s here, a cached load well under 0.5 s
FASTMATH = False  # kept off: results must not depend on reassociation
