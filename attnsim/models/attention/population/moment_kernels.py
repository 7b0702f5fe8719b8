"""Numba kernels of the population metrics' moments (driven by :mod:`.population`):
the factored softmax sums per point (the conditional moments of the output),
and the expected softplus of a Gaussian by Gauss-Hermite terms and by a
closed-form series for large standard deviations.

Every ``@njit`` function here calls only functions of this file.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ....runtime import numba_cache  # noqa: F401  (before any kernel loads)
from ....runtime.numba_cache import CACHE, ERROR_MODEL, FASTMATH
from ....runtime.workspace import PROCESS

N_CVZ = 14  # terms of the accelerated series (error below 4 * 5.83^-14 = 7e-11 relative)
_SQRT2 = math.sqrt(2.0)
_SQRTPI = math.sqrt(math.pi)
_SQRTPI_2 = math.sqrt(math.pi / 2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _erfcx(a):
    """Scaled complementary error function e^{a^2} erfc(a), for a >= 0 without
    overflow: directly below 6 (erfc keeps its relative accuracy there), else
    the asymptotic series 1/(a sqrt(pi)) sum_k (-1)^k (2k-1)!! / (2a^2)^k,
    summed while its terms shrink (error below e^{-36})."""
    if a < 6.0:
        return math.exp(a * a) * math.erfc(a)
    inv = 0.5 / (a * a)
    term = 1.0
    acc = 1.0
    for k in range(1, 40):
        nxt = -term * (2 * k - 1) * inv
        if abs(nxt) >= abs(term) or abs(nxt) < 1e-17:
            break
        term = nxt
        acc += term
    return acc / (a * _SQRTPI)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _exp_moment_above(x, sd, j):
    """E[e^{-jV}; V > 0] for V ~ N(x, sd^2) (j > 0), without overflow.

    It equals e^{-jx + j^2 sd^2 / 2} Phi((x - j sd^2) / sd). With
    b = (j sd^2 - x) / (sd sqrt 2) >= 0 the exponent and erfc(b) = erfcx(b) e^{-b^2}
    combine into e^{-x^2 / (2 sd^2)} erfcx(b) / 2; for b < 0 the exponent is
    negative and the direct form is safe.
    """
    b = (j * sd * sd - x) / (sd * _SQRT2)
    if b >= 0.0:
        t = x / sd
        return 0.5 * math.exp(-0.5 * t * t) * _erfcx(b)
    return 0.5 * math.exp(-j * x + 0.5 * j * j * sd * sd) * math.erfc(b)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _expected_softplus_series(x, sd):
    """E softplus(V), V ~ N(x, sd^2), to ~1e-12 relative for any sd > 0.

    softplus(v) = max(v, 0) + log(1 + e^{-|v|}). The first part has the closed
    form sd (t Phi(t) + phi(t)), t = x / sd (written as phi(u)(1 - u R(u)) with
    the Mills ratio R = sqrt(pi/2) erfcx(u / sqrt 2), u = -t, when t < 0, so no
    large terms cancel). The second is the alternating series
    sum_{j>=1} (-1)^{j+1} E[e^{-j|V|}] / j whose terms are moments of a positive
    measure on [0, 1] (e^{-j|v|}/j = int_{|v|}^inf e^{-js} ds), so the
    Cohen-Rodriguez Villegas-Zagier acceleration converges like 5.83^{-n}
    relative to the sum: ``N_CVZ`` terms, each two closed-form half moments.
    """
    t = x / sd
    if t >= 0.0:
        emax = x * 0.5 * math.erfc(-t / _SQRT2) + sd * math.exp(-0.5 * t * t) * _INV_SQRT2PI
    else:
        u = -t
        mills = _SQRTPI_2 * _erfcx(u / _SQRT2)
        emax = sd * math.exp(-0.5 * u * u) * _INV_SQRT2PI * (1.0 - u * mills)
    n = N_CVZ
    d = (3.0 + math.sqrt(8.0)) ** n
    d = 0.5 * (d + 1.0 / d)
    b = -1.0
    c = -d
    acc = 0.0
    for k in range(n):
        c = b - c
        j = k + 1.0
        acc += c * (_exp_moment_above(x, sd, j) + _exp_moment_above(-x, sd, j)) / j
        b = (k + n) * (k - n) * b / ((k + 0.5) * (k + 1.0))
    return emax + acc / d


@njit(cache=CACHE, fastmath=FASTMATH, nogil=True, error_model=ERROR_MODEL)
def _series_all(x, sd, out):
    for i in range(x.size):
        out[i] = _expected_softplus_series(x[i], sd[i])


def expected_softplus_series(x: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """E softplus(x + sd Z) elementwise for sd > 0 (1-d arrays), by the series."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    sd = np.ascontiguousarray(sd, dtype=np.float64)
    out = np.empty_like(x)
    _series_all(x, sd, out)
    return out


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _hermite_pack(x, sd, tops, n_nodes, nodes, order, xs, a_s, cnt, L):
    """Sort the points by band (band b: sd <= tops[b], n_nodes[b] nodes, the
    rows of ``nodes``), most nodes first, into order / xs / a_s (a = sqrt(2) sd),
    and write each point's -|x - a node| for each of its band's nodes into L:
    node h's row holds the points whose band has more than h nodes, which in
    this order are a prefix. Returns the number of entries of L used."""
    N, B = x.size, tops.size
    band = np.empty(N, np.int64)  # each point's band: how many tops its sd exceeds (no branches)
    for i in range(N):
        band[i] = 0
    for b in range(B - 1):
        top = tops[b]
        for i in range(N):
            band[i] += sd[i] > top
    for b in range(B):
        cnt[b] = 0
    for i in range(N):
        cnt[band[i]] += 1
    fill = np.empty(B, np.int64)
    pos = 0
    for b in range(B - 1, -1, -1):
        fill[b] = pos
        pos += cnt[b]
    for i in range(N):
        j = fill[band[i]]
        fill[band[i]] += 1
        order[j] = i
        xs[j] = x[i]
        a_s[j] = _SQRT2 * sd[i]
    segs = _hermite_segments(n_nodes, cnt)
    for h, b, start, end, off in segs:
        xh = nodes[b, h]
        xv, av, lv = xs[start:end], a_s[start:end], L[off + start : off + end]  # views: no gathers
        for j in range(xv.size):
            lv[j] = -abs(xv[j] - av[j] * xh)
    return segs[-1, 4] + segs[-1, 3] if segs.shape[0] else 0


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _hermite_segments(n_nodes, cnt):
    """The layout of :func:`_hermite_pack`: rows (h, b, start, end, off): node h
    of band b for the sorted points start..end-1, at L[off + start : off + end]
    (node h's row starts at off and holds the bands with more than h nodes)."""
    B = n_nodes.size
    out = np.empty((n_nodes[B - 1] * B, 5), np.int64)
    s = off = 0
    for h in range(n_nodes[B - 1]):
        start = 0
        for b in range(B - 1, -1, -1):
            if n_nodes[b] <= h:
                break
            out[s, 0], out[s, 1], out[s, 2], out[s, 3], out[s, 4] = h, b, start, start + cnt[b], off
            start += cnt[b]
            s += 1
        off += start
    return out[:s]


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _hermite_unpack(xs, a_s, order, n_nodes, nodes, weights, cnt, L, acc, out):
    """out[order[j]] = sum_h weights[b, h] softplus(v), v = xs[j] - a_s[j] nodes[b, h]
    over point j's band b, with L (as :func:`_hermite_pack` laid it out) now
    holding log(1 + e^{-|v|}); nodes are added in order."""
    for j in range(acc.size):
        acc[j] = 0.0
    for h, b, start, end, off in _hermite_segments(n_nodes, cnt):
        xh, w = nodes[b, h], weights[b, h]
        xv, av, lv, sv = xs[start:end], a_s[start:end], L[off + start : off + end], acc[start:end]
        for j in range(xv.size):
            sv[j] += w * (max(xv[j] - av[j] * xh, 0.0) + lv[j])
    for j in range(acc.size):
        out[order[j]] = acc[j]


def _work_array(name: str, rows: int, cols: int) -> np.ndarray:
    """A (rows, cols) work array of the caller ``name``, reused by this
    thread's later calls (a fresh one this size is mapped from the OS, and its
    page faults cost more than the math)."""
    buf = getattr(PROCESS.work, name, None)
    if buf is None or buf.size < rows * cols:
        buf = np.empty(rows * cols)
        setattr(PROCESS.work, name, buf)
    return buf[: rows * cols].reshape(rows, cols)


def hermite(
    x: np.ndarray,
    sd: np.ndarray,
    tops: np.ndarray,
    n_nodes: np.ndarray,
    nodes: np.ndarray,
    weights: np.ndarray,
) -> np.ndarray:
    """sum_h w_h softplus(x - sqrt(2) sd x_h) elementwise on 1-d arrays, with
    each point's Gauss-Hermite rule (nodes x_h, weights w_h of E g(Z) = sum_h
    w_h g(sqrt(2) x_h)) chosen by its sd: band b (sd <= tops[b], the bands in
    increasing order, every sd within the last) has the n_nodes[b] nodes and
    weights in row b of ``nodes`` and ``weights``. Every point's arguments are
    packed into one array (no node is evaluated for a point that does not use
    it), NumPy's vectorized exp and log1p run over all of them at once, and
    the weighted sums are added node by node."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    sd = np.ascontiguousarray(sd, dtype=np.float64)
    N = x.size
    work = _work_array("hermite", int(n_nodes[-1]) + 3, N)
    xs, a_s, acc, L = work[0], work[1], work[2], work[3:].reshape(-1)
    order, cnt = np.empty(N, dtype=np.int64), np.empty(tops.size, dtype=np.int64)
    used = _hermite_pack(x, sd, tops, n_nodes, nodes, order, xs, a_s, cnt, L)
    L = L[:used]
    np.exp(L, out=L)
    np.log1p(L, out=L)
    out = np.empty_like(x)
    _hermite_unpack(xs, a_s, order, n_nodes, nodes, weights, cnt, L, acc, out)
    return out


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _conditional_moments(E, zeta, wa, anu, b, sdc, underflow, shared, inv, ym, sd, t):
    """Per class c and point n, with the softmax weights factored as
    wa[c, v] E[v, n]: inv = 1/S (0 where S <= ``underflow``), y times the
    mean of f given zeta, its sd and their ratio t (IEEE: +-inf where sd = 0,
    NaN for 0/0). Every loop runs along the points (SIMD, no reductions).
    Returns how many (c, n) underflowed.

    Trailing tokens of mean zero (the irrelevant ones: in each class the same
    weight, and anu = 0) enter both classes only through sum e, sum zeta e and
    sum e^2, formed once in ``shared`` (3, N) and scaled per class: with
    T = 8 and five irrelevant tokens, 12 token passes instead of 16."""
    T, N = E.shape
    n_zero = 0
    while n_zero < T and _same_zero_mean(wa, anu, T - 1 - n_zero, T - 1):
        n_zero += 1
    g = min(T, -(-(T - n_zero) // 4) * 4)  # tokens summed per class: the others, filled up to groups of 4
    A1, A2, A3 = shared[0], shared[1], shared[2]
    for n in range(N):
        A1[n] = A2[n] = A3[n] = 0.0
    if g < T:
        _token_sums(E, zeta, wa, anu, 1.0, 0, g, T, True, A1, A2, A3)  # sum e, sum zeta e, sum e^2
    for c in range(2):
        k = wa[c, T - 1] if g < T else 0.0  # the shared tokens' weight in this class
        kb, k2 = k * b, k * k
        S, Y, Q = (
            inv[c],
            ym[c],
            sd[c],
        )  # the normalizer, weighted values and squared weights; then 1/S, mean, sd
        for n in range(N):
            S[n] = k * A1[n]
            Y[n] = kb * A2[n]
            Q[n] = k2 * A3[n]
        _token_sums(E, zeta, wa, anu, b, c, 0, g, False, S, Y, Q)
    bad = 0
    for c in range(2):
        sign = 1.0 - 2.0 * c
        for n in range(N):
            S = inv[c, n]
            ok = S > underflow
            r = 1.0 / S if ok else 0.0
            bad += 0 if ok else 1
            y = sign * ym[c, n]
            root = math.sqrt(sd[c, n])
            inv[c, n] = r
            ym[c, n] = y * r
            sd[c, n] = root * r * sdc
            t[c, n] = y / (root * sdc)  # the ratio of the two: 1/S cancels
    return bad


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _same_zero_mean(wa, anu, v, last):
    return wa[0, v] == wa[0, last] and wa[1, v] == wa[1, last] and anu[0, v] == 0.0 and anu[1, v] == 0.0


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _weights(wa, anu, b, c, v, unit):
    """Token v's weight w, w anu and w b in class c (unit: 1, 0 and b)."""
    w = 1.0 if unit else wa[c, v]
    u = 0.0 if unit else w * anu[c, v]
    return w, u, w * b


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _token_sums(E, zeta, wa, anu, b, c, v0, v1, unit, S, Y, Q):
    """Add tokens v0..v1-1 of class c, in order, to the sums S, Y, Q of
    :func:`_conditional_moments` (``unit``: with weight 1 and anu = 0)."""
    v = v0
    while v + 4 <= v1:  # four tokens per pass: the sums stay in registers across them
        _add_four_tokens(E, zeta, wa, anu, b, c, v, unit, S, Y, Q)
        v += 4
    for m in range(v, v1):
        w, wu, wb = _weights(wa, anu, b, c, m, unit)
        w2 = w * w
        Em, zm = E[m], zeta[m]
        for n in range(S.size):
            S[n], Y[n], Q[n] = _add_token(S[n], Y[n], Q[n], w, wu, wb, w2, Em[n], zm[n])


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _add_four_tokens(E, zeta, wa, anu, b, c, v, unit, S, Y, Q):
    """Tokens v..v+3 of class c added, in token order, to the sums S, Y, Q of
    :func:`_conditional_moments` (each point's sums loaded and stored once)."""
    w0, u0, b0 = _weights(wa, anu, b, c, v, unit)
    w1, u1, b1 = _weights(wa, anu, b, c, v + 1, unit)
    w2, u2, b2 = _weights(wa, anu, b, c, v + 2, unit)
    w3, u3, b3 = _weights(wa, anu, b, c, v + 3, unit)
    q0, q1, q2, q3 = w0 * w0, w1 * w1, w2 * w2, w3 * w3
    E0, E1, E2, E3 = E[v], E[v + 1], E[v + 2], E[v + 3]
    z0, z1, z2, z3 = zeta[v], zeta[v + 1], zeta[v + 2], zeta[v + 3]
    for n in range(S.size):
        e0, e1, e2, e3 = E0[n], E1[n], E2[n], E3[n]
        s, y, q = _add_token(S[n], Y[n], Q[n], w0, u0, b0, q0, e0, z0[n])
        s, y, q = _add_token(s, y, q, w1, u1, b1, q1, e1, z1[n])
        s, y, q = _add_token(s, y, q, w2, u2, b2, q2, e2, z2[n])
        S[n], Y[n], Q[n] = _add_token(s, y, q, w3, u3, b3, q3, e3, z3[n])


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _add_token(s, y, q, w, wu, wb, w2, e, z):
    """One token's terms added to a point's sums: w e, (w anu + w b zeta) e, w^2 e^2."""
    return s + w * e, y + (wu + wb * z) * e, q + w2 * (e * e)


def conditional_moments(
    E: np.ndarray,
    zeta: np.ndarray,
    wa: np.ndarray,
    anu: np.ndarray,
    b: float,
    sdc: float,
    underflow: float,
    out: tuple | None = None,
) -> tuple:
    """:func:`_conditional_moments`: (inv, y mean, sd, t), each (2, N), and the
    number of underflowed normalizers; ``out``: a reused (4, 2, N) array to write them to."""
    N = E.shape[1]
    buf = np.empty((4, 2, N)) if out is None else out
    inv, ym, sd, t = buf
    shared = _work_array("moments", 3, N)
    bad = _conditional_moments(
        E,
        zeta,
        np.ascontiguousarray(wa),
        np.ascontiguousarray(anu),
        float(b),
        float(sdc),
        float(underflow),
        shared,
        inv,
        ym,
        sd,
        t,
    )
    return inv, ym, sd, t, bad


# -- the tail of the error: design points and importance sampling (.tail) ------------------
