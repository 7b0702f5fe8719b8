"""Numba kernels of the attention model: forward pass, hand-derived gradients,
the many-step gradient-descent kernels and the gradient-flow vector field.

Every ``@njit`` function here calls only functions of this file (numba's
on-disk cache does not notice edits to callees in other files): the module is kept in one
module past 500 lines for that reason. The buffers
they read and write, and the wrappers that coerce their input, are in
:mod:`.buffers`; the ``_kernels`` work on contiguous float64 arrays.

The model, the hand-derived gradients (c = dL/dz, g = dL/dq = X^T c, dL/dW =
g p^T, dL/dp = W^T g), the X W form (B = X W updated in place of W when nu is
fixed) and why results do not depend on the number of threads are written
out in docs/engines.md ("How the kernels compute").
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ...runtime import numba_cache  # noqa: F401  (before any kernel loads)
from ...runtime.numba_cache import CACHE, ERROR_MODEL, FASTMATH, start_threading_layer
from ..base import DIVERGED, FROZEN, OK  # noqa: F401  (compile-time constants of the kernels)

# the GD kernels call the parallel W pass: Numba's threading layer must run before a cached
# one loads (attnsim.runtime.numba_cache says why)
start_threading_layer()

N_CHUNKS = 16  # fixed row chunks of the parallel W pass (independent of threads)
PAR_MIN = 1 << 18  # W sizes (k * r) from which the W pass runs in parallel
CHUNK_FLOATS = 1 << 16  # token block of the forward-backward pass (512 kB: stays in a core's L2 cache)
LOGISTIC, LINEAR = 0, 1
SOFTMAX, STABLEMAX = 0, 1  # the attention normalization (docs/engines.md)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _softplus(x):
    """log(1 + e^x) without overflow."""
    if x > 0.0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _stable(x):
    """StableMax's weight of a logit x: x + 1 for x >= 0, 1 / (1 - x) below."""
    return x + 1.0 if x >= 0.0 else 1.0 / (1.0 - x)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _weights(z, s, base, T, attention):
    """The unnormalized scores of the sample at z[base:base+T] into s: exp(z - max z)
    (the stable softmax's), or StableMax's; returns (index of the top-scored token, their
    sum). The first largest logit is found without branches (selects: a branch on random
    logits is mispredicted about ln T times per sample)."""
    top, zt = base, z[base]
    for t in range(base + 1, base + T):
        zz = z[t]
        up = zz > zt
        top = t if up else top
        zt = zz if up else zt
    ssum = 0.0
    if attention == SOFTMAX:
        for t in range(base, base + T):
            s[t] = math.exp(z[t] - zt)
            ssum += s[t]
    else:
        for t in range(base, base + T):
            s[t] = _stable(z[t])
            ssum += s[t]
    return top, ssum


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _outputs(z, u, y, T, loss_kind, attention, s, f):
    """Scores of logits z (n*T,) (softmax or StableMax), outputs f (n,); returns the mean loss."""
    n = f.size
    total = 0.0
    for i in range(n):
        base = i * T
        ssum = _weights(z, s, base, T, attention)[1]
        fi = 0.0
        for t in range(base, base + T):  # the scores normalized on the way
            s[t] /= ssum
            fi += s[t] * u[t]
        f[i] = fi
        m = y[i] * fi
        total += -m if loss_kind == LINEAR else _softplus(-m)
    return total / n


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _relevant_increments(s, rel, T, out, add):
    """out[i] = s_rel (1 - s_rel) of each sample i (``add``: out[i] += it), s_rel its score
    mass on relevant tokens summed in token order. Four samples' sums run side by side:
    independent chains of additions the CPU overlaps (one sum waits on each addition;
    measured 3.7x faster at n T = 16 000), each the same additions in the same order."""
    n, i = out.size, 0
    while i + 4 <= n:
        b0, b1, b2, b3 = i * T, (i + 1) * T, (i + 2) * T, (i + 3) * T
        a0 = a1 = a2 = a3 = 0.0
        for t in range(T):
            a0 += rel[b0 + t] * s[b0 + t]
            a1 += rel[b1 + t] * s[b1 + t]
            a2 += rel[b2 + t] * s[b2 + t]
            a3 += rel[b3 + t] * s[b3 + t]
        out[i] = (out[i] if add else 0.0) + a0 * (1.0 - a0)  # 0 + x is x: the same bits either way
        out[i + 1] = (out[i + 1] if add else 0.0) + a1 * (1.0 - a1)
        out[i + 2] = (out[i + 2] if add else 0.0) + a2 * (1.0 - a2)
        out[i + 3] = (out[i + 3] if add else 0.0) + a3 * (1.0 - a3)
        i += 4
    for m in range(i, n):
        a0 = 0.0
        for t in range(m * T, m * T + T):
            a0 += rel[t] * s[t]
        out[m] = (out[m] if add else 0.0) + a0 * (1.0 - a0)


@njit(cache=CACHE, fastmath=FASTMATH, nogil=True, error_model=ERROR_MODEL)
def _forward(data, W, p, nu, work, values_stale):
    """q = W p, logits, scores and outputs of the state; returns the loss
    (NaN when |q|^2 or |p|^2 overflows). ``values_stale``: recompute u = X nu."""
    np.dot(W, p, work.q)
    if not (math.isfinite(_sumsq(work.q)) and math.isfinite(_sumsq(p))):
        return math.nan
    if values_stale:
        np.dot(data.X2, nu, work.u)
    np.dot(data.X2, work.q, work.z)
    return _outputs(work.z, work.u, data.y, data.T, data.loss_kind, data.attention, work.s, work.f)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _forward_backward(data, W, p, nu, work, values_stale, want_gnu):
    """The loss with g = dL/dq (and dL/dnu when ``want_gnu``) in one pass over
    the tokens: blocks of whole samples of about ``CHUNK_FLOATS`` numbers are
    multiplied by q (BLAS) and, while still in cache, their gradient terms
    c^T X are added to g (BLAS). Two passes over all of X2 would stream it
    from memory twice when it does not fit in cache (e.g. n T = 16 000
    real-data tokens). Fills z, u (when ``values_stale``), s, f, c = dL/dz and
    w_it = a_i s_it; returns NaN when |q|^2 or |p|^2 overflows."""
    np.dot(W, p, work.q)
    if not (math.isfinite(_sumsq(work.q)) and math.isfinite(_sumsq(p))):
        return math.nan
    X2, y, T = data.X2, data.y, data.T
    n, k = y.size, X2.shape[1]
    per = max(1, CHUNK_FLOATS // (T * k))  # samples per block
    for j in range(k):
        work.g[j] = 0.0
        if want_gnu:
            work.gnu[j] = 0.0
    total = 0.0
    for i0 in range(0, n, per):
        i1 = min(n, i0 + per)
        r0, r1 = i0 * T, i1 * T
        X = X2[r0:r1]
        np.dot(X, work.q, work.z[r0:r1])
        if values_stale:
            np.dot(X, nu, work.u[r0:r1])
        total += _block_coeffs(data, i0, i1, work)
        np.dot(work.c[r0:r1], X, work.tmp)
        for j in range(k):
            work.g[j] += work.tmp[j]
        if want_gnu:
            np.dot(work.w[r0:r1], X, work.tmp)
            for j in range(k):
                work.gnu[j] += work.tmp[j]
    return total / n


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _block_coeffs(data, i0, i1, work):
    """Samples i0..i1-1: scores s, outputs f, c_it = dL/dz_it and w_it = a_i s_it, with
    a_i = dL/df_i; returns their summed loss. The softmax's c_it = w_it (u_it - f_i);
    StableMax's c_it = w_it (u_it - f_i) / (1 + |z_it|) (its weight's log-derivative).
    u_it - f_i is formed as (u_it - u_top) - sum_t' s_it' (u_it' - u_top) around
    the top-scored token, so the gradient keeps its direction while the other
    tokens' scores are below float64's resolution of 1 (down to exp(-745))."""
    y, T, n = data.y, data.T, data.y.size
    z, u, s, c, w = work.z, work.u, work.s, work.c, work.w
    stable = data.attention == STABLEMAX
    total = 0.0
    for i in range(i0, i1):
        base = i * T
        top, ssum = _weights(z, s, base, T, data.attention)
        fi = 0.0
        rest = 0.0  # f_i - u_top as sum_t s_t (u_t - u_top): no cancellation when s_top rounds to 1
        ut = u[top]
        for t in range(base, base + T):  # the scores normalized on the way
            s[t] /= ssum
            fi += s[t] * u[t]
            rest += s[t] * (u[t] - ut)
        work.f[i] = fi
        m = y[i] * fi
        if data.loss_kind == LINEAR:
            total += -m
            a = -y[i] / n
        else:
            total += _softplus(-m)
            a = -(y[i] / n) * _sigmoid(-m)
        for t in range(base, base + T):
            w[t] = a * s[t]
            c[t] = w[t] * ((u[t] - ut) - rest)
            if stable:
                c[t] /= 1.0 + abs(z[t])
    return total


ROWS = 8  # rows of W per sweep of _w_rows


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _w_rows(W, g, h, p, lr, acc, lo, hi):
    """acc += W[lo:hi]^T g[lo:hi] (rows added in order), then W[lo:hi] -= lr h p^T.

    Rows go ``ROWS`` at a time: each column's running sum stays in a register
    across them instead of a load and a store per row (the same additions in
    the same order, so the same bits), which makes the pass about 1.5x faster.
    """
    r = W.shape[1]
    i = lo
    while i + ROWS <= hi:
        g0, g1, g2, g3 = g[i], g[i + 1], g[i + 2], g[i + 3]
        g4, g5, g6, g7 = g[i + 4], g[i + 5], g[i + 6], g[i + 7]
        s0, s1, s2, s3 = lr * h[i], lr * h[i + 1], lr * h[i + 2], lr * h[i + 3]
        s4, s5, s6, s7 = lr * h[i + 4], lr * h[i + 5], lr * h[i + 6], lr * h[i + 7]
        w0, w1, w2, w3 = W[i], W[i + 1], W[i + 2], W[i + 3]  # the rows, as views
        w4, w5, w6, w7 = W[i + 4], W[i + 5], W[i + 6], W[i + 7]
        for j in range(r):
            pj = p[j]
            b0, b1, b2, b3, b4, b5, b6, b7 = w0[j], w1[j], w2[j], w3[j], w4[j], w5[j], w6[j], w7[j]
            a = acc[j]
            a += b0 * g0
            a += b1 * g1
            a += b2 * g2
            a += b3 * g3
            a += b4 * g4
            a += b5 * g5
            a += b6 * g6
            a += b7 * g7
            acc[j] = a
            w0[j], w1[j], w2[j], w3[j] = b0 - s0 * pj, b1 - s1 * pj, b2 - s2 * pj, b3 - s3 * pj
            w4[j], w5[j], w6[j], w7[j] = b4 - s4 * pj, b5 - s5 * pj, b6 - s6 * pj, b7 - s7 * pj
        i += ROWS
    for m in range(i, hi):
        gm = g[m]
        step = lr * h[m]
        for j in range(r):
            acc[j] += W[m, j] * gm
            W[m, j] -= step * p[j]


@njit(cache=CACHE, fastmath=FASTMATH, parallel=True, error_model=ERROR_MODEL)
def _w_pass_parallel(W, g, h, p, lr, part):
    """Chunk c: part[c] = W[rows_c]^T g[rows_c]; then W[rows_c] -= lr h p^T."""
    k, r = W.shape
    nc = part.shape[0]
    for c in prange(nc):
        for j in range(r):
            part[c, j] = 0.0
        _w_rows(W, g, h, p, lr, part[c], c * k // nc, (c + 1) * k // nc)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _w_pass_chunks(W, g, h, p, lr, part):
    """:func:`_w_pass_parallel`'s chunks one after the other: the same numbers, on one thread."""
    k, r = W.shape
    nc = part.shape[0]
    for c in range(nc):
        for j in range(r):
            part[c, j] = 0.0
        _w_rows(W, g, h, p, lr, part[c], c * k // nc, (c + 1) * k // nc)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _w_pass(W, g, h, p, lr, gp, part, threaded):
    """gp = W^T g with the old W, then W -= lr h p^T: one pass over W (the
    gradient step has h = g; the X W form below has W = X W, g = c, h = K c).
    Large W in fixed row chunks, on the threading layer when ``threaded`` (not in a
    forked child: GNU OpenMP, Numba's layer here, cannot run after a fork)."""
    k, r = W.shape
    for j in range(r):
        gp[j] = 0.0
    if k * r >= PAR_MIN:
        if threaded:
            _w_pass_parallel(W, g, h, p, lr, part)
        else:
            _w_pass_chunks(W, g, h, p, lr, part)
        for c in range(part.shape[0]):  # serial, fixed-order reduction
            for j in range(r):
                gp[j] += part[c, j]
        return
    _w_rows(W, g, h, p, lr, gp, 0, k)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _sumsq(a):
    acc = 0.0
    for v in a:
        acc += v * v
    return acc


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _all_zero(a):
    for v in a:
        if v != 0.0:
            return False
    return True


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _in_loop_records(data, work, step, fit_since, S_acc):
    """Update fit_since and S_acc with the state at ``step`` (its outputs and
    scores in ``work``); see :func:`_gd_segment`."""
    y, T = data.y, data.T
    for i in range(y.size):
        if y[i] * work.f[i] > 0.0:
            if fit_since[i] < 0:
                fit_since[i] = step
        else:
            fit_since[i] = -1
    _relevant_increments(work.s, data.rel, T, S_acc, True)


@njit(cache=CACHE, fastmath=FASTMATH, nogil=True, error_model=ERROR_MODEL)
def _gd_segment(data, W, p, nu, train, lr, normalized, step0, nsteps, work, fit_since, S_acc):
    """Apply ``nsteps`` GD updates to W, p, nu in place (``train``: which are updated; ``normalized``:
    each by lr * G / |G|_F, none for a zero G), keeping the in-loop records.

    At each state tau (tau = step0 .. step0 + nsteps - 1, before update tau + 1):
    ``fit_since[i]`` is the first step of the current run of states in which
    y_i f_i > 0 (-1 while unfitted) and ``S_acc[i]`` accumulates
    s_rel (1 - s_rel), s_rel the score mass on sample i's relevant tokens.

    Returns (status, step): (OK, step0 + nsteps), (DIVERGED, tau) when the loss,
    |p|^2 or |W p|^2 at state tau is not finite, or (FROZEN, tau) when every
    gradient at state tau is exactly zero (a fixed point of GD in float64).
    """
    train_W, train_p, train_nu = train
    for k in range(nsteps):
        step = step0 + k
        L = _forward_backward(data, W, p, nu, work, train_nu or k == 0, train_nu)
        if not math.isfinite(L):
            return DIVERGED, step
        _in_loop_records(data, work, step, fit_since, S_acc)
        if _all_zero(work.g) and (not train_nu or _all_zero(work.gnu)):
            return FROZEN, step
        if normalized:  # only directions count: scale g (and with it W^T g) to max |g_j| = 1
            _unit(work.g)
            if train_nu:
                _unit(work.gnu)
        lr_W = _over(lr, math.sqrt(_sumsq(work.g) * _sumsq(p))) if normalized else lr  # |g p^T| = |g||p|
        if train_W:
            _w_pass(W, work.g, work.g, p, lr_W, work.gp, work.part, data.threaded)
        elif train_p:
            np.dot(work.g, W, work.gp)
        if train_p:
            _descend(p, work.gp, lr, normalized)
        if train_nu:
            _descend(nu, work.gnu, lr, normalized)
    return OK, step0 + nsteps


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _over(lr, norm):  # lr / norm, and 0 for a zero gradient (that block takes no step)
    return lr / norm if norm > 0.0 else 0.0


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _unit(a):  # a /= max |a_j| in place: a normalized step's direction, with no underflow in its norm
    m = 0.0
    for j in range(a.size):
        m = max(m, abs(a[j]))
    if m > 0.0:
        for j in range(a.size):
            a[j] /= m


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _descend(x, g, lr, normalized):  # x -= lr g (normalized: lr g / |g|)
    step = _over(lr, math.sqrt(_sumsq(g))) if normalized else lr
    for j in range(x.size):
        x[j] -= step * g[j]


@njit(cache=CACHE, fastmath=FASTMATH, nogil=True, error_model=ERROR_MODEL)
def _gd_segment_xw(data, B, K, p, train, lr, normalized, step0, nsteps, work, v, fit_since, S_acc, pb):
    """:func:`_gd_segment` for a fixed nu, with B = X W (n*T, r) in place of W
    (see "The X W form"); ``work.u`` holds X nu; ``pb``: B in :func:`_p_pass`'s blocks
    (flat, blocks, tail) when W is fixed. Statuses as there, except that divergence is
    seen in the loss (z = B p) and |p|^2 (|g|^2 = c . K c)."""
    train_W, train_p = train
    for k in range(nsteps):
        step = step0 + k
        if not math.isfinite(_sumsq(p)):
            return DIVERGED, step
        L = _p_pass(data, pb[0], pb[1], pb[2], p, work) if not train_W else _z_and_coeffs(data, B, p, work)
        if not math.isfinite(L):
            return DIVERGED, step
        _in_loop_records(data, work, step, fit_since, S_acc)
        if _all_zero(work.c):
            return FROZEN, step
        if normalized:  # as in _gd_segment (W fixed: p's gradient B^T c is already formed)
            _unit(work.c if train_W else work.gp)
        if train_W:
            np.dot(K, work.c, v)  # X g, g = X^T c
            lr_W = _over(lr, math.sqrt(max(np.dot(work.c, v), 0.0) * _sumsq(p))) if normalized else lr
            _w_pass(B, work.c, v, p, lr_W, work.gp, work.part, data.threaded)
        if train_p:  # (W fixed: work.gp = B^T c came from the same pass as the logits)
            _descend(p, work.gp, lr, normalized)
    return OK, step0 + nsteps


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _z_and_coeffs(data, B, p, work):  # z = B p and the coefficients; the summed loss
    np.dot(B, p, work.z)
    return _block_coeffs(data, 0, data.y.size, work)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _p_pass(data, flat, blocks, tail, p, work):
    """z = B p, the coefficients c and work.gp = B^T c in one pass over B, block by
    block (:mod:`.token_blocks`: each block's rows up to its width w, C-ordered in ``flat``
    where ``blocks`` says, B's last columns in ``tail``): each block is multiplied by p and,
    still in cache, by c (B is read once per step, not twice: it rarely fits in cache);
    returns the summed loss."""
    T, r, t = data.T, p.size, tail.shape[1]
    z, c, gp, tmp = work.z, work.c, work.gp, work.part[0]
    for j in range(r):
        gp[j] = 0.0
    total = 0.0
    for b in range(blocks.shape[0]):
        i0, i1, off, w = blocks[b, 0], blocks[b, 1], blocks[b, 2], blocks[b, 3]
        a, e = i0 * T, i1 * T
        Bb = flat[off : off + (e - a) * w].reshape(e - a, w)
        np.dot(Bb, p[:w], z[a:e])
        for i in range(a, e):
            for j in range(t):
                z[i] += tail[i, j] * p[r - t + j]
        total += _block_coeffs(data, i0, i1, work)
        np.dot(c[a:e], Bb, tmp[:w])
        for j in range(w):
            gp[j] += tmp[j]
        for i in range(a, e):
            for j in range(t):
                gp[r - t + j] += c[i] * tail[i, j]
    return total


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _flow_rhs(data, theta, W, p, nu, train, lr, work, values_stale, out):
    """Gradient-flow vector field -grad L at the packed state theta.

    Layout of theta and out: [W (k*r) if trained, p (r) if trained, nu (k) if trained,
    S (n)], with dS_i/dt = s_rel,i (1 - s_rel,i) / lr so that S counts in units
    of GD steps (t = lr * step); W, p, nu are the fixed blocks (used where not trained).
    theta comes contiguous: its blocks are contiguous views, as the products need.
    ``values_stale``: work.u does not hold X nu (always, when nu is trained).
    Returns the loss (NaN flags divergence).
    """
    train_W, train_p, train_nu = train
    k, r = W.shape
    o = 0
    if train_W:
        W = theta[: k * r].reshape(k, r)
        o += k * r
    if train_p:
        p = theta[o : o + r]
        o += r
    if train_nu:
        nu = theta[o : o + k]
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
    S = out[j : j + data.y.size]
    _relevant_increments(work.s, data.rel, data.T, S, False)
    for i in range(S.size):
        S[i] /= lr
    return L
