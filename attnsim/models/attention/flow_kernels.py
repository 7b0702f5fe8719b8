"""The gradient-flow vector field of the attention model (a Numba kernel; SPEC §6)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ...runtime.numba_cache import CACHE, FASTMATH
from .kernels import _forward_backward, _relevant_increment


@njit(cache=CACHE, fastmath=FASTMATH)
def _flow_rhs(data, W, p, nu, train, lr, work, values_stale, out):
    """Gradient-flow vector field -grad L at the state (W, p, nu).

    Layout of out: [W (k*r) if trained, p (r) if trained, nu (k) if trained,
    S (n)], with dS_i/dt = s_rel,i (1 - s_rel,i) / lr so that S counts in units
    of GD steps (t = lr * step). W, p, nu come contiguous (views of the packed
    state where trained): a view taken here would be copied before each product.
    ``values_stale``: work.u does not hold X nu (always, when nu is trained).
    Returns the loss (NaN flags divergence).
    """
    train_W, train_p, train_nu = train
    k, r = W.shape
    L = _forward_backward(data, W, p, nu, work, values_stale or train_nu, train_nu)
    j = 0
    if train_W:
        for a in range(k):
            ga = -work.g[a]
            for b in range(r):
                out[j + b] = ga * p[b]
            j += r
    if train_p:
        np.dot(work.g, W, work.gp)
        for b in range(r):
            out[j] = -work.gp[b]
            j += 1
    if train_nu:
        for a in range(k):
            out[j] = -work.gnu[a]
            j += 1
    for i in range(data.y.size):
        out[j + i] = _relevant_increment(work.s, data.rel, data.T, i) / lr
    return L
