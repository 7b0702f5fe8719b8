"""Numba kernel of online SGD in the frame of overlaps (:class:`.fresh.OnlineFrame`).

Every ``@njit`` function here calls only functions of this file (numba's on-disk
cache does not notice edits to callees in other files). The kernel takes a chunk
of the steps' random numbers, drawn by the caller from one stream per kind so that
the run does not depend on where its chunks begin.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ...runtime import numba_cache  # noqa: F401  (before any kernel loads)
from ...runtime.numba_cache import CACHE, ERROR_MODEL, FASTMATH

LINEAR = 1  # loss_kind of the linear loss (the logistic loss otherwise), as in .buffers


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _softplus(x):
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _sigmoid(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _chol2(a, b, d):
    """(L00, L10, L11) of the lower factor of [[a, b], [b, d]] (positive semi-definite)."""
    L00 = math.sqrt(max(a, 0.0))
    L10 = b / L00 if L00 > 0 else 0.0
    return L00, L10, math.sqrt(max(d - L10 * L10, 0.0))


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def online_frame_steps(xi, flip_u, chi, zn, y_true, means, p, nu, sigma, lr, eta, tp, tn, loss_kind):
    """Steps k = 0..K-1 of online SGD with W = I in the frame (:class:`.fresh.OnlineFrame`):
    batch tokens sigma xi[k] + means (B, T, 4), label b flipped when flip_u[k, b] < eta,
    the part outside the frame from the Bartlett factor sigma [[chi[k, 0], zn[k]], [0,
    chi[k, 1]]]; p and nu (frame coordinates, q on f3 alone) updated in place. Returns
    the number of steps taken: K, or the index of the first step whose loss or state is
    not finite (the state is then that step's start)."""
    K, B, T = xi.shape[0], xi.shape[1], xi.shape[2]
    X = np.empty((T, 4))
    z, u, s = np.empty(T), np.empty(T), np.empty(T)
    g, gnu = np.empty(4), np.empty(4)
    for k in range(K):
        g[:] = 0.0
        gnu[:] = 0.0
        total, cc, cw, ww = 0.0, 0.0, 0.0, 0.0
        for b in range(B):
            y = -y_true[b] if flip_u[k, b] < eta else y_true[b]
            top = 0
            for t in range(T):
                zt, ut = 0.0, 0.0
                for j in range(4):
                    x = sigma * xi[k, b, t, j] + means[b, t, j]
                    X[t, j] = x
                    zt += x * p[j]
                    ut += x * nu[j]
                z[t], u[t] = zt, ut
                if zt > z[top]:
                    top = t
            ssum = 0.0
            for t in range(T):
                s[t] = math.exp(z[t] - z[top])
                ssum += s[t]
            fi, rest = 0.0, 0.0
            for t in range(T):
                s[t] /= ssum
                fi += s[t] * u[t]
                rest += s[t] * (u[t] - u[top])
            m = y * fi
            if loss_kind == LINEAR:
                total += -m
                a = -y / B
            else:
                total += _softplus(-m)
                a = -(y / B) * _sigmoid(-m)
            for t in range(T):
                w = a * s[t]
                c = w * ((u[t] - u[top]) - rest)
                for j in range(4):
                    g[j] += c * X[t, j]
                    gnu[j] += w * X[t, j]
                c = c if tp else 0.0
                w = w if tn else 0.0
                cc += c * c
                cw += c * w
                ww += w * w
        if not math.isfinite(total):
            return k
        # the Gram matrix of the update's parts outside the frame: lr^2 Lc Bt^T Bt Lc^T
        l00, l10, l11 = _chol2(cc, cw, ww)
        b00, b01, b11 = sigma * chi[k, 0], sigma * zn[k], sigma * chi[k, 1]
        # M = Bt Lc^T (2 x 2), gram = lr^2 M^T M
        m00, m01 = b00 * l00 + b01 * 0.0, b00 * l10 + b01 * l11
        m10, m11 = 0.0, b11 * l11
        g00 = lr * lr * (m00 * m00 + m10 * m10)
        g01 = lr * lr * (m00 * m01 + m10 * m11)
        g11 = lr * lr * (m01 * m01 + m11 * m11)
        for j in range(4):
            if tp:
                p[j] -= lr * g[j]
            if tn:
                nu[j] -= lr * gnu[j]
        a00 = p[2] * p[2] + p[3] * p[3] + g00
        a01 = p[2] * nu[2] + p[3] * nu[3] + g01
        a11 = nu[2] * nu[2] + nu[3] * nu[3] + g11
        l00, l10, l11 = _chol2(a00, a01, a11)
        p[2], p[3], nu[2], nu[3] = l00, 0.0, l10, l11
        if not (math.isfinite(l00) and math.isfinite(l11) and math.isfinite(p[0] + p[1] + nu[0] + nu[1])):
            return k
    return K
