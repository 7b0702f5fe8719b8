"""AdamW steps of the attention model (a Numba kernel; SPEC §15).

The update is torch.optim.AdamW's (decoupled weight decay, bias-corrected
moments), per trained block, element by element::

    x *= 1 - lr wd;  m += (1 - b1)(G - m);  v = b2 v + (1 - b2) G^2
    x -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

with t the update's number (1 for the first). The per-coordinate scaling ties
the update to the coordinates of d: it is exact in the dense engine only.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ...runtime.numba_cache import CACHE, FASTMATH
from ..base import DIVERGED, OK
from .kernels import _forward_backward, _in_loop_records


@njit(cache=CACHE, fastmath=FASTMATH)
def _adamw(x, g, m, v, lr, b1, b2, eps, wd, step_size, bc2_sqrt):
    """One AdamW update of the flat block x with gradient g and moments m, v (in place)."""
    for j in range(x.size):
        x[j] *= 1.0 - lr * wd
        m[j] += (g[j] - m[j]) * (1.0 - b1)
        v[j] = v[j] * b2 + (1.0 - b2) * g[j] * g[j]
        x[j] -= step_size * m[j] / (math.sqrt(v[j]) / bc2_sqrt + eps)


@njit(cache=CACHE, fastmath=FASTMATH, nogil=True)
def _adam_segment(data, W, p, nu, train, lr, hyper, moments, G_W, step0, nsteps, work, fit_since, S_acc):
    """``nsteps`` AdamW updates of W, p, nu in place (``train``: which), as
    :func:`attnsim.models.attention.kernels._gd_segment` with the same
    statuses except FROZEN (the moments move a state whose gradient is 0).
    ``hyper`` = (beta1, beta2, eps, weight_decay); ``moments`` = (m_W, v_W,
    m_p, v_p, m_nu, v_nu), flat; ``G_W`` a (k*r,) buffer for g p^T."""
    train_W, train_p, train_nu = train
    b1, b2, eps, wd = hyper
    m_W, v_W, m_p, v_p, m_nu, v_nu = moments
    k, r = W.shape
    Wf = W.reshape(k * r)
    for s in range(nsteps):
        step = step0 + s
        L = _forward_backward(data, W, p, nu, work, train_nu or s == 0, train_nu)
        if not math.isfinite(L):
            return DIVERGED, step
        _in_loop_records(data, work, step, fit_since, S_acc)
        t = step + 1  # the update's number, as torch counts it
        step_size = lr / (1.0 - b1**t)
        bc2_sqrt = math.sqrt(1.0 - b2**t)
        if train_p:
            np.dot(work.g, W, work.gp)  # p's gradient W^T g at this state, before W moves
        if train_W:
            for a in range(k):
                for b in range(r):
                    G_W[a * r + b] = work.g[a] * p[b]
            _adamw(Wf, G_W, m_W, v_W, lr, b1, b2, eps, wd, step_size, bc2_sqrt)
        if train_p:
            _adamw(p, work.gp, m_p, v_p, lr, b1, b2, eps, wd, step_size, bc2_sqrt)
        if train_nu:
            _adamw(nu, work.gnu, m_nu, v_nu, lr, b1, b2, eps, wd, step_size, bc2_sqrt)
    return OK, step0 + nsteps
