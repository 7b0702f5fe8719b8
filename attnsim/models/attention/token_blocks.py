"""The blocks in which the X W form with W fixed reads B = X W(0) at each step
(:func:`.kernels._p_pass`): whole samples of about ``CHUNK_FLOATS`` numbers, each
multiplied by p and, while still in cache, by the loss coefficients.

Generated tokens in the reduced engine's coordinates are the tokens' Cholesky
factor followed by the two signal columns (:func:`.engines.generated_coordinates`):
with W(0) = I, B's first n T columns are lower triangular. A block's rows then have
nothing but zeros from their last row's index on, up to the signal columns: the
pass reads each block up to there, and the signal columns beside it, half of B in
all (at n T = 3200, p trained alone, 2.7 ms per step instead of 5.0). The zeros it
skips add nothing to a sum, but the blocks' products are summed in another order,
so B p and B^T c differ from the full products by rounding. A B that fits in a few
blocks is read whole, as before (no faster read in halves: measured equal at
n T = 320)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .kernels import CHUNK_FLOATS

HALF_MIN = 4 * CHUNK_FLOATS  # B of fewer numbers is read whole


class PassBlocks(NamedTuple):
    """B for :func:`.kernels._p_pass`: ``blocks[b]`` = (first sample, end sample,
    offset in ``flat``, width w), the block's rows' first w columns C-ordered at that
    offset; ``tail`` (n T, t) the last t columns of B (the signal columns), which
    every row reads; B's other columns are 0 in the block's rows."""

    flat: np.ndarray
    blocks: np.ndarray
    tail: np.ndarray


def pass_blocks(B: np.ndarray, T: int) -> PassBlocks:
    """The blocks of a C-ordered B (n T, r): halves when its first columns are lower
    triangular and it holds at least ``HALF_MIN`` numbers, else whole rows (``flat``
    a view of B: the same products as reading B itself)."""
    rows, r = B.shape
    n = rows // T
    spans = _triangular_spans(B, T) if B.size >= HALF_MIN else None
    if spans is None:
        per = max(1, CHUNK_FLOATS // (T * r))
        blocks = [(i0, min(n, i0 + per), i0 * T * r, r) for i0 in range(0, n, per)]
        return PassBlocks(B.reshape(-1), np.array(blocks, dtype=np.int64).reshape(-1, 4), np.zeros((rows, 0)))
    m = min(rows, r)
    sizes = [(i1 - i0) * T * w for i0, i1, w in spans]
    offsets = np.cumsum([0, *sizes])
    flat = np.empty(offsets[-1])
    for (i0, i1, w), off, size in zip(spans, offsets, sizes):
        flat[off : off + size] = B[i0 * T : i1 * T, :w].reshape(-1)
    blocks = [(i0, i1, off, w) for (i0, i1, w), off in zip(spans, offsets)]
    return PassBlocks(flat, np.array(blocks, dtype=np.int64), np.ascontiguousarray(B[:, m:]))


def _triangular_spans(B: np.ndarray, T: int) -> list[tuple[int, int, int]] | None:
    """(first sample, end sample, width) of each block when B's first min(n T, r)
    columns are lower triangular (each block's rows 0 from its width on), else None."""
    rows, r = B.shape
    n, m = rows // T, min(rows, r)
    spans, i0 = [], 0
    while i0 < n:
        i1 = i0 + 1
        while i1 < n and (i1 + 1 - i0) * T * min((i1 + 1) * T, m) <= CHUNK_FLOATS:
            i1 += 1
        w = min(i1 * T, m)
        if B[i0 * T : i1 * T, w:m].any():
            return None
        spans.append((i0, i1, w))
        i0 = i1
    return spans
