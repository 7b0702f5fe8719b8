"""Numba kernels of positional and semantic attention (SPEC §18): the loss and its gradient in
one pass over the training tokens.

The data enter the loss only through h = X Q / sqrt(d) and three per-sample constants, K = X X^T,
C = Y X^T and |Y|^2 (T x T, T x T and a number, computed once from the data): with S the
attention, |S X - Y|^2 = sum_l (S K S^T)_ll - 2 (S C^T)_ll + |Y|^2 and dL/dS = (S K - C) / d.
A step therefore reads each sample's T tokens once, to form h and, while they are in cache, to
add X^T dL/dh to the gradient: one pass over the (n T x d) token matrix, the fewest a step can
make. The targets Y are never stored.

Every ``@njit`` function here calls only functions of this file; they run on one thread.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ...runtime import numba_cache  # noqa: F401  (before any kernel loads)
from ...runtime.numba_cache import CACHE, ERROR_MODEL, FASTMATH


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _project(X, i, QT, inv, h):
    """h[t] = X[i, t] . Q / sqrt(d) for every token t of sample i (QT = Q^T, rows contiguous;
    four partial sums per column)."""
    T, d = X.shape[1], X.shape[2]
    r = QT.shape[0]
    for t in range(T):
        x = X[i, t]
        for a in range(r):
            q = QT[a]
            s0 = 0.0
            s1 = 0.0
            s2 = 0.0
            s3 = 0.0
            j = 0
            while j + 4 <= d:
                s0 += x[j] * q[j]
                s1 += x[j + 1] * q[j + 1]
                s2 += x[j + 2] * q[j + 2]
                s3 += x[j + 3] * q[j + 3]
                j += 4
            while j < d:
                s0 += x[j] * q[j]
                j += 1
            h[t, a] = ((s0 + s1) + (s2 + s3)) * inv


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _attend(h, S):
    """S = row softmax of h h^T (shifted by each row's maximum)."""
    T, r = h.shape
    for t in range(T):
        top = -np.inf
        for m in range(T):
            z = 0.0
            for a in range(r):
                z += h[t, a] * h[m, a]
            S[t, m] = z
            if z > top:
                top = z
        total = 0.0
        for m in range(T):
            e = math.exp(S[t, m] - top)
            S[t, m] = e
            total += e
        for m in range(T):
            S[t, m] /= total


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _sample_loss(S, K, C, yy, i, SK):
    """|S X - Y|^2 of sample i from its constants; SK = S K is left for the gradient."""
    T = S.shape[0]
    total = yy[i]
    for t in range(T):
        for m in range(T):
            acc = 0.0
            for k in range(T):
                acc += S[t, k] * K[i, k, m]
            SK[t, m] = acc
        for m in range(T):
            total += S[t, m] * (SK[t, m] - 2.0 * C[i, t, m])
    return total


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def loss_grad(X, Q, K, C, yy, grad):
    """The summed loss sum_i |S_i X_i - Y_i|^2 / (2 d) at Q, its gradient written into ``grad`` (d, r)."""
    n, T, d = X.shape
    r = Q.shape[1]
    inv = 1.0 / math.sqrt(d)
    QT = np.ascontiguousarray(Q.T)
    gT = np.zeros((r, d))  # the gradient's columns, each contiguous
    h = np.empty((T, r))
    S = np.empty((T, T))
    SK = np.empty((T, T))
    E = np.empty((T, T))
    w = np.empty((T, r))
    total = 0.0
    for i in range(n):
        _project(X, i, QT, inv, h)
        _attend(h, S)
        total += _sample_loss(S, K, C, yy, i, SK)
        for t in range(T):  # E = S * (G - rowsum(S G)), G = (S K - C) / d
            mean = 0.0
            for m in range(T):
                E[t, m] = (SK[t, m] - C[i, t, m]) / d
                mean += S[t, m] * E[t, m]
            for m in range(T):
                E[t, m] = S[t, m] * (E[t, m] - mean)
        for t in range(T):  # w = (E + E^T) h / sqrt(d): the weight of token t's row in the gradient
            for a in range(r):
                acc = 0.0
                for m in range(T):
                    acc += (E[t, m] + E[m, t]) * h[m, a]
                w[t, a] = acc * inv
        for a in range(r):
            g = gT[a]
            for t in range(T):
                x = X[i, t]
                wl = w[t, a]
                for j in range(d):
                    g[j] += x[j] * wl
    grad[:, :] = gT.T
    return total / (2.0 * d)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def loss_only(X, Q, K, C, yy):
    """The summed loss at Q (no gradient): one pass over the tokens."""
    n, T, d = X.shape
    r = Q.shape[1]
    QT = np.ascontiguousarray(Q.T)
    h = np.empty((T, r))
    S = np.empty((T, T))
    SK = np.empty((T, T))
    total = 0.0
    for i in range(n):
        _project(X, i, QT, 1.0 / math.sqrt(d), h)
        _attend(h, S)
        total += _sample_loss(S, K, C, yy, i, SK)
    return total / (2.0 * d)
