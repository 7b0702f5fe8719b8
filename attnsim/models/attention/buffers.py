"""What the attention model's kernels (:mod:`.kernels`) read and write: the
problem's arrays (:class:`Data`), the buffers every step overwrites
(:class:`Work`), the coercion of their input, and the thresholds that choose a
GD stepper's form (plain Python: no Numba here)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from .kernels import LINEAR, LOGISTIC, N_CHUNKS, SOFTMAX, STABLEMAX

XW_MAX_TOKENS = 4096  # the X W form keeps K = X X^T (n*T squared floats): at most 128 MB
XW_MAX_COND = 1e6  # ... and is used when K's condition number is at most this (W rebuilt to ~1e-10)
XW_MIN_LOG_GAP = 200  # ... and when log points are at least this many steps apart on average


class Data(NamedTuple):
    """One training problem in engine coordinates (read only in the kernels)."""

    X2: np.ndarray  # (n*T, k) tokens
    y: np.ndarray  # (n,) observed labels
    rel: np.ndarray  # (n*T,) 1 on relevant tokens (for the cumulative frakS), else 0
    T: int
    loss_kind: int
    threaded: bool = True  # large W passes on the threading layer (False in a forked child)
    attention: int = SOFTMAX  # the scores' normalization: SOFTMAX or STABLEMAX


class Work(NamedTuple):
    """Buffers every step overwrites (see :func:`work_for`)."""

    q: np.ndarray  # (k,) W p
    z: np.ndarray  # (n*T,) logits
    u: np.ndarray  # (n*T,) token values x . nu
    s: np.ndarray  # (n*T,) scores
    f: np.ndarray  # (n,) outputs
    c: np.ndarray  # (n*T,) dL/dz
    w: np.ndarray  # (n*T,) a_i s_it
    g: np.ndarray  # (k,) dL/dq
    gnu: np.ndarray  # (k,) dL/dnu
    gp: np.ndarray  # (r,) W^T g
    part: np.ndarray  # (N_CHUNKS, r) per-chunk partial sums of the parallel W pass
    tmp: np.ndarray  # (k,) one block's gradient terms


def work_for(nT: int, n: int, k: int, r: int) -> Work:
    e = np.empty
    return Work(e(k), e(nT), e(nT), e(nT), e(n), e(nT), e(nT), e(k), e(k), e(r), e((N_CHUNKS, r)), e(k))


def f64(a: ArrayLike) -> np.ndarray:
    """``a`` as a contiguous float64 array (no copy when it already is one)."""
    return np.ascontiguousarray(a, dtype=np.float64)


def loss_kind_code(loss: str) -> int:
    return {"logistic": LOGISTIC, "linear": LINEAR}[loss]


def attention_code(attention: str) -> int:
    """The kernels' code of ``attention = softmax | stablemax``."""
    return {"softmax": SOFTMAX, "stablemax": STABLEMAX}[attention]
