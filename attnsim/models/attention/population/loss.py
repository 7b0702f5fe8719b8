"""The expected loss of a fresh sample given its logit noises: E softplus(x + sd Z),
Z ~ N(0, 1), to ~1e-10 relative for any sd (SPEC §5), the part of the
population loss that is exact in the output's conditional noise."""

from __future__ import annotations

import functools
import math

import numpy as np

from . import moment_kernels, pop_kernels
from .moment_kernels import expected_softplus_series

TAYLOR_SD = 0.15  # conditional sd up to which the expected loss uses a Taylor series (2.2e-11 relative)
HERMITE_SD = 0.7  # ... then Gauss-Hermite up to this sd (5e-11 relative), then a closed-form series


@functools.lru_cache(maxsize=8)
def hermite_rule(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The n-node Gauss-Hermite rule for E g(Z), Z ~ N(0, 1): E g(Z) ~ sum_h w_h g(sqrt(2) x_h)."""
    x, w = np.polynomial.hermite.hermgauss(n)
    return x, w / math.sqrt(math.pi)


# (largest sd, nodes) of Gauss-Hermite for E softplus(m + sd Z): relative error at
# most 5e-11, measured against adaptive quadrature (tests/test_attention_population.py);
# softplus is analytic in a strip of half-width pi, so the error falls like (sd / pi)^(2n)
HERMITE_NODES = ((0.2, 5), (0.25, 6), (0.3, 7), (0.4, 8), (0.5, 10), (0.6, 12), (0.7, 14))


@functools.lru_cache(maxsize=1)
def hermite_table() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The bands of :data:`HERMITE_NODES` as :func:`.moment_kernels.hermite`
    takes them: their tops, node counts, and (bands, most nodes) node and weight rows."""
    tops = np.array([top for top, _ in HERMITE_NODES])
    counts = np.array([n for _, n in HERMITE_NODES], dtype=np.int64)
    nodes, weights = np.zeros((tops.size, counts.max())), np.zeros((tops.size, counts.max()))
    for b, n in enumerate(counts):
        nodes[b, :n], weights[b, :n] = hermite_rule(int(n))
    return tops, counts, nodes, weights


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + e^x) elementwise, without overflow."""
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def expected_softplus(x: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """E softplus(x + sd Z), Z ~ N(0, 1), elementwise, to ~1e-10 relative for any sd >= 0.

    sd <= TAYLOR_SD: the eighth-order Taylor series in sd^2
    (:func:`.pop_kernels.taylor`); sd <= HERMITE_SD:
    Gauss-Hermite, each point with the nodes :data:`HERMITE_NODES` gives for
    its sd; larger sd: the closed-form series of
    :func:`.moment_kernels._expected_softplus_series`
    (a fixed rule would lose accuracy there: 1e-3 relative at sd = 5 with 32 nodes).
    """
    x, sd = np.asarray(x, dtype=np.float64), np.asarray(sd, dtype=np.float64)
    if x.shape != sd.shape:
        x, sd = np.broadcast_arrays(x, sd)
    shape = x.shape
    x, sd = x.ravel(), sd.ravel()
    if x.size == 0:
        return np.empty(shape)
    out = np.empty(x.shape)
    lo_sd, top_sd = float(sd.min()), float(sd.max())
    bands = [
        (-math.inf, TAYLOR_SD, pop_kernels.taylor),
        (TAYLOR_SD, HERMITE_SD, lambda xs, ss: moment_kernels.hermite(xs, ss, *hermite_table())),
        (HERMITE_SD, math.inf, expected_softplus_series),
    ]
    for lo, top, rule in bands:
        if lo < lo_sd and top_sd <= top:  # every point in this band
            return rule(x, sd).reshape(shape)
        if top_sd <= lo or lo_sd > top:  # none
            continue
        sel = (sd > lo) & (sd <= top)
        if sel.any():
            out[sel] = rule(x[sel], sd[sel])
    return out.reshape(shape)
