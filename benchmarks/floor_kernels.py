"""Floors of attnsim's hot loops, as bare loops (SPEC §9): each does only the
passes over its arrays that the loop it floors cannot avoid, with the same
numerics rules (float64, no fastmath, BLAS through NumPy's dot inside Numba),
and nothing else: no records, no checks, no bookkeeping. The benchmarks time
them in the same run as the loops themselves.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def _rw_pass(M, a, h, p, lr, gp):
    """One pass reading and writing M: gp = M^T a (the old M), then M -= lr h p^T."""
    rows, r = M.shape
    for j in range(r):
        gp[j] = 0.0
    for i in range(rows):
        ai = a[i]
        step = lr * h[i]
        for j in range(r):
            gp[j] += M[i, j] * ai
            M[i, j] -= step * p[j]


@njit(cache=True)
def reduced_step_floor(X, W, p, c, lr, nsteps, q, z, g, gp):
    """The W form's unavoidable passes per step: q = W p (read W), z = X q and
    g = X^T c (read X twice; the gradient needs the outputs first), one exp
    per token (the softmax), and one pass that reads and writes W (W^T g
    for p's gradient, then W -= lr g p^T); c is held fixed (the loss's
    coefficients are not part of the floor)."""
    k, r = W.shape
    acc = 0.0
    for _ in range(nsteps):
        np.dot(W, p, q)
        np.dot(X, q, z)
        for t in range(z.size):
            acc += math.exp(-abs(z[t]))
        np.dot(c, X, g)
        _rw_pass(W, g, g, p, lr, gp)
        for j in range(r):
            p[j] -= lr * 1e-12 * gp[j]
    return acc


@njit(cache=True)
def reduced_xw_step_floor(B, K, p, c, lr, nsteps, z, v, gp):
    """The X W form's unavoidable passes per step: z = B p (read B), v = K c
    (read K), one exp per token, one pass reading and writing B (B^T c for p's
    gradient, then B -= lr v p^T)."""
    m, r = B.shape
    acc = 0.0
    for _ in range(nsteps):
        np.dot(B, p, z)
        for t in range(z.size):
            acc += math.exp(-abs(z[t]))
        np.dot(K, c, v)
        _rw_pass(B, c, v, p, lr, gp)
        for j in range(r):
            p[j] -= lr * 1e-12 * gp[j]
    return acc


@njit(cache=True)
def flow_rhs_floor(X, W, p, c, q, z, g, gp, out):
    """The gradient-flow vector field's unavoidable passes: q = W p (read W),
    z = X q and g = X^T c (read X twice), one exp per token, W's velocity
    -g p^T written out and W^T g (read W) for p's."""
    k, r = W.shape
    np.dot(W, p, q)
    np.dot(X, q, z)
    acc = 0.0
    for t in range(z.size):
        acc += math.exp(-abs(z[t]))
    np.dot(c, X, g)
    for i in range(k):
        for j in range(r):
            out[i * r + j] = -g[i] * p[j]
    np.dot(g, W, gp)
    for j in range(r):
        out[k * r + j] = -gp[j]
    return acc


@njit(cache=True)
def _population_sums(E, tail_E, wa, anu, s0, s1):
    T, N = E.shape
    acc = 0.0
    for n in range(N):
        for c in range(2):
            s0[c] = 0.0
            s1[c] = 0.0
        for t in range(T):
            e = E[t, n]
            for c in range(2):
                ew = e * wa[c, t]
                s0[c] += ew
                s1[c] += ew * anu[c, t]
        for c in range(2):
            acc += s1[c] / s0[c]
    T1, P = tail_E.shape[1], tail_E.shape[2]
    for c in range(2):
        for n in range(P):
            a0 = 0.0
            a1 = 0.0
            for t in range(T1):
                e = tail_E[c, t, n]
                a0 += e
                a1 += e * anu[c, t % T]
            acc += a1 / a0
    return acc


def population_floor(D, tail_D, sq, wa, anu, s0, s1, E, tail_E, cdf):
    """A population evaluation's unavoidable work: one exp per point and token
    of the bulk points D (T, N), shared by both classes, and of the tail
    estimator's points tail_D (2, T + 1, P), one set per class (NumPy's
    vectorized exp, as attnsim uses); one pass of sums over them (each class's
    softmax normalizer and output mean); and one more exp per point and class
    for the normal tail probability (a rational approximation needs at least
    that). Not in it: the tail estimator's search for its design points and the
    weights of its mixture proposal, the loss's Taylor terms, the scores."""
    np.multiply(D, sq, out=E)
    np.exp(E, out=E)
    np.multiply(tail_D, sq, out=tail_E)
    np.exp(tail_E, out=tail_E)
    acc = _population_sums(E, tail_E, wa, anu, s0, s1)
    np.exp(
        np.negative(np.abs(cdf, out=cdf), out=cdf), out=cdf
    )  # exp(-|x|): the work of one exp, never overflowing
    return acc


def _mixture_weights(A, counts, X, K, U):
    """The mixture proposal's weights of the tail points of one class: every point's
    product with each component's half-space normal (T + 1 numbers; one BLAS product)
    and that component's normal density there (NumPy's vectorized exp, as attnsim), summed
    with the components' shares (``counts``, K + 1): what any balance-heuristic weight needs."""
    U = np.dot(A[1 : K + 1], X, out=U[:K])
    np.multiply(U, U, out=U)
    np.multiply(U, -0.5, out=U)
    np.exp(U, out=U)
    return float(counts[0] * U.shape[1] + counts[1 : K + 1] @ U.sum(axis=1))


def population_floor_with_tail(pop, args, D, tail_D, sq, wa, anu, s0, s1, E, tail_E, cdf, U):
    """:func:`population_floor` and what the tail estimator's proposal cannot do without:
    its design-point search for both classes (attnsim's own Newton search, run as it is:
    a search is the work, there is no barer one) and the mixture weights of its points
    (:func:`_mixture_weights`). ``pop``: a Population; ``args``: its (aq, anu, kappa, b, sdc)."""
    from attnsim.models.attention.population import design_kernels
    from attnsim.models.attention.population.tail import DEFENSIVE, FLOOR, MAX_BETA, MERGE, PRUNE

    acc = population_floor(D, tail_D, sq, wa, anu, s0, s1, E, tail_E, cdf)
    aq, an, kappa, b, sdc = args
    tail = pop.tail
    w = tail._w
    settings = (DEFENSIVE, FLOOR, MERGE, MAX_BETA, PRUNE)
    for c, y in enumerate((1.0, -1.0)):
        K, _ = design_kernels._tail_components(
            np.ascontiguousarray(aq[c]), np.ascontiguousarray(an[c]), kappa, b, sdc, y, tail.N, settings, w
        )
        acc += _mixture_weights(w.A, w.counts, tail.X[c], K, U)
    return acc


@njit(cache=True)
def twin_step_floor(W, p, q, g, gp, lr, nsteps):
    """A precision twin's unavoidable passes over its d x d W per step, in its format
    (float32): q = W p (read W), then one pass reading and writing W (W^T g for p's
    gradient, then W -= lr g p^T)."""
    for _ in range(nsteps):
        np.dot(W, p, q)
        _rw_pass(W, g, g, p, lr, gp)
        for j in range(p.size):
            p[j] -= lr * gp[j] * 1e-12


@njit(cache=True)
def token_pass_floor(X, Q, grad):
    """The one pass a positional/semantic GD step cannot avoid: every token row read once,
    its projection x . Q formed and the row added to the gradient with that weight (the
    arithmetic of attnsim's fused step without the T x T softmax algebra between)."""
    n, T, d = X.shape
    r = Q.shape[1]
    grad[:, :] = 0.0
    for i in range(n):
        for t in range(T):
            for a in range(r):
                s0 = 0.0
                s1 = 0.0
                s2 = 0.0
                s3 = 0.0
                j = 0
                while j + 4 <= d:
                    s0 += X[i, t, j] * Q[j, a]
                    s1 += X[i, t, j + 1] * Q[j + 1, a]
                    s2 += X[i, t, j + 2] * Q[j + 2, a]
                    s3 += X[i, t, j + 3] * Q[j + 3, a]
                    j += 4
                while j < d:
                    s0 += X[i, t, j] * Q[j, a]
                    j += 1
                w = 1e-3 * ((s0 + s1) + (s2 + s3))
                for j in range(d):
                    grad[j, a] += X[i, t, j] * w
