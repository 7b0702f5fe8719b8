"""Numba kernel that measures the attention model's state without stepping it: the
distance |W - W(0)|^2 of a trained W from its initialization (the ``W_dev``
metric), without forming W - W(0), an array as large as W.

Every ``@njit`` function here calls only functions of this file (numba's on-disk
cache does not notice edits to callees in other files).
"""

from __future__ import annotations

from numba import njit

from ...runtime import numba_cache  # noqa: F401  (before any kernel loads)
from ...runtime.numba_cache import CACHE, ERROR_MODEL, FASTMATH


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _sq_dist(a, b):
    """sum (a - b)^2 over two contiguous arrays of one size, as eight
    interleaved partial sums added in a fixed order (independent chains the
    CPU overlaps; a single running sum waits on each addition)."""
    a, b = a.reshape(-1), b.reshape(-1)
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    m = a.size // 8
    for i in range(m):
        j = 8 * i
        d0, d1, d2, d3 = a[j] - b[j], a[j + 1] - b[j + 1], a[j + 2] - b[j + 2], a[j + 3] - b[j + 3]
        d4, d5, d6, d7 = a[j + 4] - b[j + 4], a[j + 5] - b[j + 5], a[j + 6] - b[j + 6], a[j + 7] - b[j + 7]
        s0, s1, s2, s3 = s0 + d0 * d0, s1 + d1 * d1, s2 + d2 * d2, s3 + d3 * d3
        s4, s5, s6, s7 = s4 + d4 * d4, s5 + d5 * d5, s6 + d6 * d6, s7 + d7 * d7
    tail = 0.0
    for j in range(8 * m, a.size):
        d = a[j] - b[j]
        tail += d * d
    return (((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))) + tail
