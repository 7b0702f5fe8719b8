"""The initial parameters W(0) and p(0), from the run's init stream (SPEC §2).

W(0) is drawn row by row, top to bottom, in blocks (:func:`W0_blocks`), then p(0)
if ``init_p = gaussian``; a sweep worker may read W(0) from the kept draws of its
workspace (:class:`attnsim.runtime.workspace.KeptDraws`). The encoder's parameters
are drawn by :func:`attnsim.models.encoder.params.init_params`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from .runtime.threads import halves
from .runtime.workspace import DRAW_CHUNK, KeptDraws

BLOCK_ELEMENTS = 1 << 22  # W(0) is drawn in row blocks of about this many numbers (32 MB)


class W0Init(NamedTuple):
    """How W(0) is drawn: ``kind`` (kaiming_uniform, gaussian, identity) and the entries' sd."""

    kind: str
    scale: float


def draw_W0(init: W0Init, rng: np.random.Generator, d: int, kept: KeptDraws | None = None) -> np.ndarray:
    """W(0), d x d: the numbers of :func:`W0_blocks` (the reduced engine can stream the same blocks)."""
    return fill_W0(init, rng, np.empty((d, d)), kept)


def fill_W0(
    init: W0Init, rng: np.random.Generator, out: np.ndarray, kept: KeptDraws | None = None
) -> np.ndarray:
    """W(0) into ``out`` (d x d), the numbers of :func:`W0_blocks`, and ``rng``
    left where they leave it.

    The uniform init takes exactly one 64-bit draw of the stream per number, so
    the two halves of the rows are drawn at once (:func:`attnsim.runtime.threads.halves`)
    from copies of the stream, the second jumped ahead past the first half
    (``PCG64.advance``); the stream is then jumped past all d^2 numbers. In a
    sweep worker the numbers may come from its workspace's ``kept`` draws instead.
    """
    d = out.shape[0]
    kept = kept.take(rng, d * d, init.kind) if kept is not None else None
    if kept is not None:
        flat = out.reshape(-1)
        for lo in range(0, kept.size, DRAW_CHUNK // 8):  # chunks that stay in cache
            chunk = flat[lo : lo + DRAW_CHUNK // 8]
            chunk[:] = kept[lo : lo + chunk.size]
            _scale_draws(init.kind, init.scale, chunk)
        return out
    if init.kind in ("gaussian", "identity") or not _jumps(rng):
        for _ in W0_blocks(init, rng, d, out=out):
            pass
        return out
    _random_in_halves(rng, out, lambda rows: _scale_draws(init.kind, init.scale, rows))
    return out


def uniform_fill(rng: np.random.Generator, low: float, high: float, out: np.ndarray) -> np.ndarray:
    """``rng.uniform(low, high, out.shape)`` into ``out``: the same numbers (low + (high - low) u,
    one 64-bit draw each) and ``rng`` left where they leave it, drawn as two halves at once
    (:func:`fill_W0`'s way) when the stream can jump."""
    if not _jumps(rng):
        out[...] = rng.uniform(low, high, out.shape)
        return out
    width = high - low

    def scale(part: np.ndarray) -> None:
        np.multiply(part, width, out=part)
        np.add(part, low, out=part)

    _random_in_halves(rng, out.reshape(-1, out.shape[-1]) if out.ndim > 1 else out[None, :], scale)
    return out


def _jumps(rng: np.random.Generator) -> bool:
    """Whether ``rng``'s stream can be copied and jumped ahead by a count of 64-bit draws."""
    bg = rng.bit_generator
    return hasattr(bg, "advance") and not bg.state.get("has_uint32", 1)


def _random_in_halves(rng: np.random.Generator, out: np.ndarray, then) -> None:
    """``rng.random(out=out)`` for a 2-d ``out``, its two halves of rows at once
    (:func:`attnsim.runtime.threads.halves`) from copies of the stream, the second jumped past
    the first half (``PCG64.advance``), ``then(rows)`` applied to each half; the stream is then
    jumped past all the numbers."""
    bg = rng.bit_generator
    state, cols = bg.state, out.shape[1]

    def rows(lo: int, hi: int) -> None:
        copy = type(bg)()
        copy.state = state
        copy.advance(lo * cols)
        np.random.Generator(copy).random(out=out[lo:hi])
        then(out[lo:hi])

    halves(rows, out.shape[0])
    bg.advance(out.size)


def W0_block_rows(d: int) -> int:
    """Rows per block of :func:`W0_blocks`: about ``BLOCK_ELEMENTS`` numbers, >= 64 rows."""
    return min(d, max(64, BLOCK_ELEMENTS // d))


def W0_blocks(
    init: W0Init,
    rng: np.random.Generator,
    d: int,
    out: np.ndarray | None = None,
    buf: np.ndarray | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield (first row, block) of W(0) in row blocks of :func:`W0_block_rows`
    rows, top to bottom; the draws are identical to one full draw. Blocks are
    views of ``out`` (d x d) when given, else of one reused buffer ``buf``
    (allocated if None; memory O(BLOCK_ELEMENTS + 64 d): copy a block to keep it)."""
    rows = W0_block_rows(d)
    if out is None and buf is None:
        buf = np.empty((rows, d))
    for lo in range(0, d, rows):
        hi = min(d, lo + rows)
        block = out[lo:hi] if out is not None else buf[: hi - lo]
        if init.kind == "identity":
            block[:] = 0.0
            block[np.arange(hi - lo), np.arange(lo, hi)] = 1.0
        else:
            getattr(rng, KeptDraws.KINDS[init.kind])(out=block)
            _scale_draws(init.kind, init.scale, block)
        yield lo, block


def _scale_draws(init_W: str, scale: float, block: np.ndarray) -> None:
    """W(0)'s numbers from its raw draws, in place: standard normals times the
    scale, or for kaiming_uniform the uniforms u on [0, 1) to U(-a, a) as
    rng.uniform(-a, a) computes them, -a + 2a u (one 64-bit draw per number;
    U(-a, a) has std a / sqrt(3))."""
    if init_W == "gaussian":
        block *= scale
    else:
        a = scale * math.sqrt(3.0)
        block *= 2.0 * a
        block -= a


def draw_p0(init_p: str, scale: float, rng: np.random.Generator, d: int) -> np.ndarray:
    """p(0) of dimension d: zeros, or ``scale`` times d standard normals from ``rng``."""
    if init_p == "zeros":
        return np.zeros(d)
    return scale * rng.standard_normal(d)
