"""Numba kernels of the population metrics (driven by :mod:`attnsim.population`):
the factored softmax sums per point, the normal tail, the expected softplus of
a Gaussian (Taylor series, Gauss-Hermite terms, and a closed-form series for
large standard deviations) and the per-point terms of the error and loss.

The per-point kernels use arithmetic only (no libm call: the exponentials come
in from NumPy, whose exp is vectorized) and ``error_model="numpy"`` (no
division-by-zero checks), so their loops compile to SIMD instructions: the
normal tail costs about a fifth of scipy.special.ndtr here.

Every ``@njit`` function here calls only functions of this file.
"""

from __future__ import annotations

import math
import threading

import numpy as np
from numba import njit

from ._flags import CACHE, FASTMATH

N_CVZ = 14  # terms of the accelerated series (error below 4 * 5.83^-14 = 7e-11 relative)
_SQRT2 = math.sqrt(2.0)
_SQRTPI = math.sqrt(math.pi)
_SQRTPI_2 = math.sqrt(math.pi / 2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)
_INV_SQRTPI = 1.0 / math.sqrt(math.pi)
_SQRT1_2 = math.sqrt(0.5)
LOSS_NONE, LOSS_LINEAR, LOSS_TAYLOR = 0, 1, 2  # what _point_terms does for the loss
N_ATANH = 16  # terms s^3 .. s^33 of the atanh series (s <= 1/3: error below 2e-18 relative)
_ATANH = tuple(1.0 / (2 * j + 1) for j in range(N_ATANH + 1))  # its coefficients, of s^(2j + 1)

# W. J. Cody's rational Chebyshev approximations of erf and erfc (Math. Comp. 23,
# 631-638, 1969; the coefficients of his CALERF): erf(a) = a P1(a^2) / Q1(a^2) for
# a < 0.46875; erfc(a) = e^{-a^2} P2(a) / Q2(a) for a <= 4; and
# erfc(a) = e^{-a^2} (1/sqrt(pi) - w P3(w) / Q3(w)) / a, w = 1 / a^2, beyond.
# Highest power first; Q polynomials are monic.
_P1 = (1.85777706184603153e-1, 3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
       3.20937758913846947e03)  # fmt: skip
_Q1 = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03)
_P2 = (2.15311535474403846e-8, 5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
       2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03, 2.05107837782607147e03,
       1.23033935479799725e03)  # fmt: skip
_Q2 = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02, 1.62138957456669019e03,
       3.29079923573345963e03, 4.36261909014324716e03, 3.43936767414372164e03,
       1.23033935480374942e03)  # fmt: skip
_P3 = (1.63153871373020978e-2, 3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
       1.60837851487422766e-2, 6.58749161529837803e-4)  # fmt: skip
_Q3 = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1, 6.05183413124413191e-2,
       2.33520497626869185e-3)  # fmt: skip


# Horner's rule written out for each length (a loop over the coefficient tuple
# is not always unrolled once inlined into a SIMD loop, and then each lane
# gathers the coefficients from memory: 3x slower).


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _horner5(c, x):
    return (((c[0] * x + c[1]) * x + c[2]) * x + c[3]) * x + c[4]


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _horner6(c, x):
    return ((((c[0] * x + c[1]) * x + c[2]) * x + c[3]) * x + c[4]) * x + c[5]


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _horner9(c, x):
    acc = (((c[0] * x + c[1]) * x + c[2]) * x + c[3]) * x + c[4]
    return (((acc * x + c[5]) * x + c[6]) * x + c[7]) * x + c[8]


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _monic4(c, x):
    """x^4 + c[0] x^3 + ... + c[3]."""
    return (((x + c[0]) * x + c[1]) * x + c[2]) * x + c[3]


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _monic5(c, x):
    return ((((x + c[0]) * x + c[1]) * x + c[2]) * x + c[3]) * x + c[4]


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _monic8(c, x):
    acc = (((x + c[0]) * x + c[1]) * x + c[2]) * x + c[3]
    return (((acc * x + c[4]) * x + c[5]) * x + c[6]) * x + c[7]


SMALL_A, MID_A = (
    0.46875,
    4.0,
)  # a = |t| / sqrt 2 below SMALL_A: Cody's erf; up to MID_A: his erfc; beyond: asymptotic
TAIL_BLOCK = 256  # points per block of _upper_tails (a block computes only the ranges its points need)


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _tail_small(a):
    z = a * a
    return 0.5 - 0.5 * a * _horner5(_P1, z) / _monic4(_Q1, z)


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _tail_mid(a, g):
    return 0.5 * g * _horner9(_P2, a) / _monic8(_Q2, a)


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _tail_far(a, g):
    w = 1.0 / max(a * a, 16.0)
    p3 = w * _horner6(_P3, w)
    q3 = _monic5(_Q3, w)
    return 0.5 * g * (_INV_SQRTPI * q3 - p3) / (a * q3)


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _log1p_unit(e):
    """log(1 + e) for 0 <= e <= 1 in arithmetic only: 2 atanh(s), s = e / (2 + e)
    <= 1/3, by its series (``N_ATANH`` terms; a few ulp, as log1p)."""
    s = e / (2.0 + e)
    u = s * s
    c = _ATANH
    acc = (((c[16] * u + c[15]) * u + c[14]) * u + c[13]) * u + c[12]
    acc = (((acc * u + c[11]) * u + c[10]) * u + c[9]) * u + c[8]
    acc = (((acc * u + c[7]) * u + c[6]) * u + c[5]) * u + c[4]
    acc = (((acc * u + c[3]) * u + c[2]) * u + c[1]) * u + c[0]
    return 2.0 * s * acc


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _upper_tail(t, g):
    """Phi(-|t|) by whichever approximation |t| needs (selects, not branches;
    the ranges above SMALL_A share one division)."""
    a = math.fabs(t) * _SQRT1_2
    z = a * a
    w = 1.0 / max(z, 16.0)
    p3 = w * _horner6(_P3, w)
    q3 = _monic5(_Q3, w)
    mid = a <= MID_A
    num = _horner9(_P2, a) if mid else _INV_SQRTPI * q3 - p3
    den = _monic8(_Q2, a) if mid else a * q3
    return _tail_small(a) if a < SMALL_A else 0.5 * g * num / den


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _signed_tail(t, v):
    """Phi(-t) from v = Phi(-|t|); exactly 0 or 1 for |t| >= 40 (and NaN)."""
    v = v if t >= 0.0 else 1.0 - v
    return v if math.fabs(t) < 40.0 else (1.0 if t < 0.0 else 0.0)


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _small_or_mid(t, g):
    a = math.fabs(t) * _SQRT1_2
    return _tail_small(a) if a < SMALL_A else _tail_mid(a, g)


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _upper_tails(t, g, out):
    """out = Phi(-t) = erfc(t / sqrt 2) / 2 from g = e^{-t^2 / 2}, by Cody's
    rational approximations (1e-15 relative, as scipy.special.ndtr; both lose
    t^2 eps to the rounding of t). |t| >= 40 (and NaN) gives exactly 0 or 1.

    In blocks of ``TAIL_BLOCK`` points, each evaluating only the approximations
    its points need (by range of a = |t| / sqrt 2; the points of a state
    mostly share one or two ranges), one loop per case (the compiler does not
    split a loop on a flag tested inside it), so every loop stays SIMD: 1.5x
    faster than evaluating all three everywhere."""
    for i0 in range(0, t.size, TAIL_BLOCK):
        # views of the block: indices from 0, which the compiler sees are in range (else it gathers)
        tb, gb, ob = t[i0 : i0 + TAIL_BLOCK], g[i0 : i0 + TAIL_BLOCK], out[i0 : i0 + TAIL_BLOCK]
        m = tb.size
        n_small = n_far = 0
        for i in range(m):
            a = math.fabs(tb[i]) * _SQRT1_2
            n_small += a < SMALL_A
            n_far += a > MID_A
        if n_far == m:
            for i in range(m):
                ob[i] = _signed_tail(tb[i], _tail_far(math.fabs(tb[i]) * _SQRT1_2, gb[i]))
        elif n_far == 0 and n_small == 0:
            for i in range(m):
                ob[i] = _signed_tail(tb[i], _tail_mid(math.fabs(tb[i]) * _SQRT1_2, gb[i]))
        elif n_far == 0:
            for i in range(m):
                ob[i] = _signed_tail(tb[i], _small_or_mid(tb[i], gb[i]))
        else:
            for i in range(m):
                ob[i] = _signed_tail(tb[i], _upper_tail(tb[i], gb[i]))


def upper_tail(t: np.ndarray) -> np.ndarray:
    """Phi(-t) elementwise (1-d), as scipy.special.ndtr(-t)."""
    t = np.ascontiguousarray(t, dtype=np.float64)
    out = np.empty_like(t)
    with np.errstate(over="ignore", invalid="ignore"):
        _upper_tails(t, np.exp(-0.5 * t * t), out)
    return out


@njit(cache=CACHE, fastmath=FASTMATH)
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


@njit(cache=CACHE, fastmath=FASTMATH)
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


@njit(cache=CACHE, fastmath=FASTMATH)
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


@njit(cache=CACHE, fastmath=FASTMATH, nogil=True)
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _taylor(x, sd, ex):
    """E softplus(x + sd Z) by its Taylor series in sd^2 to eighth order, from
    ex = e^{-|x|} (computed by vectorized NumPy) and lg = log(1 + ex):

        sp(x) + sum_{k=1..4} sd^{2k} / (2^k k!) sp^(2k)(x),   sp(x) = max(x, 0) + lg,

    with v = sigma(x) (1 - sigma(x)) = ex / (1 + ex)^2 and the even derivatives
    sp^(2) = v, sp^(4) = v (1 - 6v), sp^(6) = v (1 - 30v + 120v^2),
    sp^(8) = v (1 - 126v + 1680v^2 - 5040v^3) (from sigma' = v,
    v' = v (1 - 2 sigma), (1 - 2 sigma)^2 = 1 - 4v). Within 2.2e-11 relative
    for sd <= 0.15 (tests/test_population.py).
    """
    lg = _log1p_unit(ex)
    v = ex / ((1.0 + ex) * (1.0 + ex))
    s2 = sd * sd
    t4 = s2 * s2 / 384.0 * (1.0 - 126.0 * v + 1680.0 * v * v - 5040.0 * v * v * v)
    t3 = s2 / 48.0 * (1.0 - 30.0 * v + 120.0 * v * v) + t4
    t2 = s2 / 8.0 * (1.0 - 6.0 * v) + s2 * t3
    return max(x, 0.0) + lg + s2 * v * (0.5 + t2)


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _taylor_all(x, sd, ex, out):
    for i in range(x.size):
        out[i] = _taylor(x[i], sd[i], ex[i])


def taylor(x: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """:func:`_taylor` elementwise on 1-d arrays (sd <= 0.15 for 2e-11 relative)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    sd = np.ascontiguousarray(sd, dtype=np.float64)
    out = np.empty_like(x)
    _taylor_all(x, sd, np.exp(-np.abs(x)), out)
    return out


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
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


_WORK = threading.local()


def _work_array(name: str, rows: int, cols: int) -> np.ndarray:
    """A (rows, cols) work array of the caller ``name``, reused by this
    thread's later calls (a fresh one this size is mapped from the OS, and its
    page faults cost more than the math)."""
    buf = getattr(_WORK, name, None)
    if buf is None or buf.size < rows * cols:
        buf = np.empty(rows * cols)
        setattr(_WORK, name, buf)
    return buf[: rows * cols].reshape(rows, cols)


def hermite(x: np.ndarray, sd: np.ndarray, tops: np.ndarray, n_nodes: np.ndarray, nodes: np.ndarray,
            weights: np.ndarray) -> np.ndarray:  # fmt: skip
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _point_terms(t, g, x, sd, ex, error, loss_rule, err, loss):
    """Per point: the error Phi(-t) (from g = e^{-t^2/2}; only with ``error``)
    and the expected loss by ``loss_rule``: LOSS_LINEAR (x itself),
    LOSS_TAYLOR (:func:`_taylor` from ex = e^{-|x|}; meaningful where sd <=
    TAYLOR_SD, the caller replaces the rest) or LOSS_NONE (left to the caller)."""
    if error:
        _upper_tails(t, g, err)
    if loss_rule == LOSS_LINEAR:
        for i in range(t.size):
            loss[i] = x[i]
    elif loss_rule == LOSS_TAYLOR:
        for i in range(t.size):
            loss[i] = _taylor(x[i], sd[i], ex[i])


def point_terms(t: np.ndarray, x: np.ndarray, sd: np.ndarray, linear: bool, taylor: bool = True,
                work: np.ndarray | None = None,
                error: bool = True) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """:func:`_point_terms` on arrays of one shape: (error, loss) per point;
    without ``taylor`` the logistic loss is left for the caller, without
    ``error`` the error (its entries are then undefined). ``work``: a reused
    (4, t.size) array the results and temporaries are written to."""
    shape = t.shape
    t, x, sd = (np.ascontiguousarray(a, dtype=np.float64).reshape(-1) for a in (t, x, sd))
    g, ex, err, loss = np.empty((4, t.size)) if work is None else work
    if error:
        with np.errstate(over="ignore", invalid="ignore"):  # t^2 may overflow: g = 0 then, as it should
            np.multiply(t, t, out=g)
            np.multiply(g, -0.5, out=g)
            np.exp(g, out=g)
    rule = LOSS_LINEAR if linear else LOSS_TAYLOR if taylor else LOSS_NONE
    if rule == LOSS_TAYLOR:
        np.abs(x, out=ex)
        np.negative(ex, out=ex)
        np.exp(ex, out=ex)
    _point_terms(t, g, x, sd, ex, error, rule, err, loss)
    return err.reshape(shape), loss.reshape(shape)


@njit(cache=CACHE, fastmath=FASTMATH, nogil=True)
def _scramble_means(err, loss, R, M, err_r, loss_r):
    for r in range(R):
        e0 = e1 = e2 = e3 = l0 = l1 = l2 = l3 = 0.0  # four running sums each: not one long dependent chain
        for c in range(2):
            ev, lv = err[c, r * M : (r + 1) * M], loss[c, r * M : (r + 1) * M]
            m4 = M - M % 4
            for m in range(0, m4, 4):
                e0, e1, e2, e3 = e0 + ev[m], e1 + ev[m + 1], e2 + ev[m + 2], e3 + ev[m + 3]
                l0, l1, l2, l3 = l0 + lv[m], l1 + lv[m + 1], l2 + lv[m + 2], l3 + lv[m + 3]
            for m in range(m4, M):
                e0, l0 = e0 + ev[m], l0 + lv[m]
        err_r[r] = ((e0 + e1) + (e2 + e3)) / (2 * M)
        loss_r[r] = ((l0 + l1) + (l2 + l3)) / (2 * M)


def scramble_means(err: np.ndarray, loss: np.ndarray, R: int, M: int) -> tuple[np.ndarray, np.ndarray]:
    """Per scramble the mean error and loss over its points and both classes:
    err, loss are (2, R * M), scramble r holding points r M .. (r + 1) M - 1."""
    err_r, loss_r = np.empty(R), np.empty(R)
    _scramble_means(np.ascontiguousarray(err), np.ascontiguousarray(loss), R, M, err_r, loss_r)
    return err_r, loss_r


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _same_zero_mean(wa, anu, v, last):
    return wa[0, v] == wa[0, last] and wa[1, v] == wa[1, last] and anu[0, v] == 0.0 and anu[1, v] == 0.0


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _weights(wa, anu, b, c, v, unit):
    """Token v's weight w, w anu and w b in class c (unit: 1, 0 and b)."""
    w = 1.0 if unit else wa[c, v]
    u = 0.0 if unit else w * anu[c, v]
    return w, u, w * b


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _add_token(s, y, q, w, wu, wb, w2, e, z):
    """One token's terms added to a point's sums: w e, (w anu + w b zeta) e, w^2 e^2."""
    return s + w * e, y + (wu + wb * z) * e, q + w2 * (e * e)


def conditional_moments(E, zeta, wa, anu, b: float, sdc: float, underflow: float, out=None):
    """:func:`_conditional_moments`: (inv, y mean, sd, t), each (2, N), and the
    number of underflowed normalizers; ``out``: a reused (4, 2, N) array to write them to."""
    N = E.shape[1]
    buf = np.empty((4, 2, N)) if out is None else out
    inv, ym, sd, t = buf
    shared = _work_array("moments", 3, N)
    bad = _conditional_moments(E, zeta, np.ascontiguousarray(wa), np.ascontiguousarray(anu), float(b),
                               float(sdc), float(underflow), shared, inv, ym, sd, t)  # fmt: skip
    return inv, ym, sd, t, bad


# -- the tail of the error: design points and importance sampling (attnsim.tail) ------------------

_SQRT_2_PI = math.sqrt(2.0 / math.pi)
PLANE_ITERS = 40  # Newton iterations of a design point at most (converged in 5-10 at the defaults)


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _log_upper(t):
    """log Phi(-t) for any finite t (the scaled erfc beyond t = 3, so no underflow)."""
    return _log_upper_mills(t)[0]


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _log_upper_mills(t):
    """(log Phi(-t), phi(t) / Phi(-t)): the latter is the derivative of -log Phi(-t)."""
    a = t * _SQRT1_2
    if t > 3.0:
        ex = _erfcx(a)
        return math.log(0.5 * ex) - 0.5 * t * t, _SQRT_2_PI / ex
    up = 0.5 * math.erfc(a)
    return math.log(up), _INV_SQRT2PI * math.exp(-0.5 * t * t) / up


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _softmax(aq, kappa, zeta, s):
    """s = softmax(aq + kappa zeta), stably (the largest logit subtracted first)."""
    T = zeta.size
    top = -math.inf
    for i in range(T):
        s[i] = aq[i] + kappa * zeta[i]
        top = max(top, s[i])
    tot = 0.0
    for i in range(T):
        s[i] = math.exp(s[i] - top)
        tot += s[i]
    for i in range(T):
        s[i] /= tot


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _t_grad(zeta, aq, an, kappa, b, sdc, y, s, grad):
    """t(zeta) = y m / (sdc |s|) of one class at the standardized logit noises
    zeta (T,), and its gradient into ``grad`` (s: a (T,) work array).

    With s = softmax(aq + kappa zeta), values v = an + b zeta, m = s . v and
    Q = s . s: dm/dzeta_u = kappa s_u (v_u - m) + b s_u and
    dQ/dzeta_u = 2 kappa s_u (s_u - Q), so dt = y dm / D - t dQ / (2 Q), D = sdc sqrt(Q).
    """
    T = zeta.size
    _softmax(aq, kappa, zeta, s)
    m = 0.0
    Q = 0.0
    for i in range(T):
        m += s[i] * (an[i] + b * zeta[i])
        Q += s[i] * s[i]
    D = sdc * math.sqrt(Q)
    t = y * m / D
    for u in range(T):
        dm = kappa * s[u] * (an[u] + b * zeta[u] - m) + b * s[u]
        dQ = 2.0 * kappa * s[u] * (s[u] - Q)
        grad[u] = y * dm / D - t * dQ / (2.0 * Q)
    return t


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _psi_plane(u, w, d1, d2, aq, an, kappa, b, sdc, y, zeta, s):
    """psi = -|zeta|^2 / 2 + log Phi(-t) at zeta = u d1 + w d2 with its first
    and second derivatives in (u, w): (psi, psi_u, psi_w, psi_uu, psi_uw, psi_ww).

    Along a direction d the softmax moves as s' = kappa s (d - dbar), dbar = s . d,
    and the values v = an + b zeta as v' = b d; so m = s . v has
    m' = kappa s . ((d - dbar) v) + b dbar, Q = s . s has Q' = 2 s . s', and
    for a second direction e, s'' = kappa (s'_e (d - dbar) - s dbar'_e) with
    dbar'_e = s'_e . d, m'' = s'' . v + b (s'_d . e + s'_e . d),
    Q'' = 2 (s'_d . s'_e + s . s''). With t = c m Q^(-1/2), c = y / sdc, and
    log Phi(-t)' = -lam t', '' = -lam (lam - t) t' t' - lam t'' (lam the
    inverse Mills ratio) the rest is the chain rule.
    """
    T = zeta.size
    for i in range(T):
        zeta[i] = u * d1[i] + w * d2[i]
    _softmax(aq, kappa, zeta, s)
    m = Q = m1 = m2 = b1 = b2 = 0.0
    for i in range(T):
        vi = an[i] + b * zeta[i]
        m += s[i] * vi
        Q += s[i] * s[i]
        b1 += s[i] * d1[i]
        b2 += s[i] * d2[i]
    # first derivatives of m and Q along d1, d2; second ones along (d1 d1), (d1 d2), (d2 d2)
    q1 = q2 = m11 = m12 = m22 = q11 = q12 = q22 = 0.0
    c11 = c12 = c22 = 0.0  # dbar'
    for i in range(T):
        s1 = kappa * s[i] * (d1[i] - b1)
        s2 = kappa * s[i] * (d2[i] - b2)
        vi = an[i] + b * zeta[i]
        m1 += s1 * vi
        m2 += s2 * vi
        q1 += 2.0 * s[i] * s1
        q2 += 2.0 * s[i] * s2
        c11 += s1 * d1[i]
        c12 += s2 * d1[i]  # d/d2 of dbar_1
        c22 += s2 * d2[i]
    m1 += b * b1
    m2 += b * b2
    for i in range(T):
        s1 = kappa * s[i] * (d1[i] - b1)
        s2 = kappa * s[i] * (d2[i] - b2)
        vi = an[i] + b * zeta[i]
        s11 = kappa * (s1 * (d1[i] - b1) - s[i] * c11)
        s12 = kappa * (s2 * (d1[i] - b1) - s[i] * c12)
        s22 = kappa * (s2 * (d2[i] - b2) - s[i] * c22)
        m11 += s11 * vi + 2.0 * b * s1 * d1[i]
        m12 += s12 * vi + b * (s1 * d2[i] + s2 * d1[i])
        m22 += s22 * vi + 2.0 * b * s2 * d2[i]
        q11 += 2.0 * (s1 * s1 + s[i] * s11)
        q12 += 2.0 * (s1 * s2 + s[i] * s12)
        q22 += 2.0 * (s2 * s2 + s[i] * s22)
    c = y / sdc
    r = 1.0 / math.sqrt(Q)
    t = c * m * r
    t1 = c * (m1 * r - 0.5 * m * r * r * r * q1)
    t2 = c * (m2 * r - 0.5 * m * r * r * r * q2)
    r3, r5 = r * r * r, r * r * r * r * r
    t11 = c * (m11 * r - m1 * r3 * q1 - 0.5 * m * r3 * q11 + 0.75 * m * r5 * q1 * q1)
    t12 = c * (m12 * r - 0.5 * (m1 * q2 + m2 * q1) * r3 - 0.5 * m * r3 * q12 + 0.75 * m * r5 * q1 * q2)
    t22 = c * (m22 * r - m2 * r3 * q2 - 0.5 * m * r3 * q22 + 0.75 * m * r5 * q2 * q2)
    psi, lam = _log_upper_mills(t)
    curv = lam * (lam - t)
    zz = z1 = z2 = 0.0
    for i in range(T):
        zz += zeta[i] * zeta[i]
        z1 += zeta[i] * d1[i]
        z2 += zeta[i] * d2[i]
    n11 = n12 = n22 = 0.0
    for i in range(T):
        n11 += d1[i] * d1[i]
        n12 += d1[i] * d2[i]
        n22 += d2[i] * d2[i]
    return (psi - 0.5 * zz, -z1 - lam * t1, -z2 - lam * t2, -n11 - curv * t1 * t1 - lam * t11,
            -n12 - curv * t1 * t2 - lam * t12, -n22 - curv * t2 * t2 - lam * t22)  # fmt: skip


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _plane_optimum(d1, d2, plane, u, w, aq, an, kappa, b, sdc, y, zeta, s):
    """The maximum of psi over the plane zeta = u d1 + w d2 (``plane``; else
    the line zeta = u d1, w = 0) by Newton's method from (u, w) (the exact
    Hessian of :func:`_psi_plane`, shifted to be negative definite; steps at
    most 3 long; backtracking): (u, w, psi)."""
    if not plane:
        w = 0.0
    psi, gu, gw, huu, huw, hww = _psi_plane(u, w, d1, d2, aq, an, kappa, b, sdc, y, zeta, s)
    for _ in range(PLANE_ITERS):
        huu, huw, hww = -huu, -huw, -hww  # positive definite at a maximum
        if not plane:
            gw, huw, hww = 0.0, 0.0, 1.0
        tr = huu + hww
        det = huu * hww - huw * huw
        low = 0.5 * (tr - math.sqrt(max(tr * tr - 4.0 * det, 0.0)))
        if not low > 1e-3:
            shift = 1e-3 - low if low == low else 1.0
            huu += shift
            hww += shift
            det = huu * hww - huw * huw
        du = (hww * gu - huw * gw) / det
        dw = (huu * gw - huw * gu) / det
        size = math.sqrt(du * du + dw * dw)
        if size > 3.0:
            du *= 3.0 / size
            dw *= 3.0 / size
        slope = gu * du + gw * dw
        step = 1.0
        moved = False
        for _ in range(40):
            new = _psi_plane(u + step * du, w + step * dw, d1, d2, aq, an, kappa, b, sdc, y, zeta, s)
            if new[0] >= psi + 1e-4 * step * slope:
                u += step * du
                w += step * dw
                psi, gu, gw, huu, huw, hww = new
                moved = True
                break
            step *= 0.5
        if not moved or step * size < 1e-7 * (1.0 + abs(u) + abs(w)):
            break
    return u, w, psi


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _centered(v, out):
    """out = v minus its mean, normalized: a direction orthogonal to (1, ..., 1),
    along which the softmax does not move (shifting every logit alike costs
    |zeta|^2 and changes nothing but the values' b zeta part)."""
    T = v.size
    mean = 0.0
    for i in range(T):
        mean += v[i]
    mean /= T
    norm = 0.0
    for i in range(T):
        out[i] = v[i] - mean
        norm += out[i] * out[i]
    norm = math.sqrt(norm)
    for i in range(T):
        out[i] = out[i] / norm if norm > 0.0 else 0.0  # v constant: no direction


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _token_groups(aq, an, members, offsets):
    """Group the tokens of one class into exchangeable groups, tokens of equal
    (aq, an) (the integrand is symmetric under permutations within each):
    group g holds tokens members[offsets[g]:offsets[g+1]] in increasing order,
    its first one the group's representative. Returns the number of groups."""
    T = aq.size
    done = np.zeros(T, np.bool_)
    pos = 0
    n = 0
    for i in range(T):
        if done[i]:
            continue
        offsets[n] = pos
        for j in range(i, T):
            if not done[j] and aq[j] == aq[i] and an[j] == an[i]:
                done[j] = True
                members[pos] = j
                pos += 1
        n += 1
    offsets[n] = pos
    return n


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _design_points(aq, an, kappa, b, sdc, y, members, offsets, n_groups, Z, G, t0, rep):
    """Design points of one class's error integrand phi(zeta) Phi(-t(zeta)):
    the origin; the maximum of psi = -|zeta|^2/2 + log Phi(-t) on the line of
    the anchor group's direction (the group of the token that carries the
    margin, y an_t s_t largest at zeta = 0, falling together against all the
    other tokens: directions are centered, :func:`_centered`); then for the
    representative j of each other group the maximum of psi over the plane
    spanned by that direction and token j's (rising as well), and on the
    line of token j's direction (rising alone): the failure boundary is
    curved, and these points cover its arc. Writes points Z (K, T), gradients of t there
    G (K, T), t there t0 (K,) and rep (K,): the group whose representative
    the point favours (-1: symmetric within every group); returns K (at most 2 T)."""
    T = aq.size
    s = np.empty(T)
    zeta = np.zeros(T)
    top = aq.max()
    r = 0
    best = -math.inf
    for i in range(T):
        v = math.exp(aq[i] - top) * y * an[i]
        if v > best:
            best, r = v, i
    eg = np.zeros(T)
    anchor = 0
    for g in range(n_groups):
        for m in range(offsets[g], offsets[g + 1]):
            if members[m] == r:
                anchor = g
    for m in range(offsets[anchor], offsets[anchor + 1]):
        eg[members[m]] = 1.0
    dg = np.empty(T)
    _centered(eg, dg)  # the anchor group falling against all the others
    for i in range(T):
        Z[0, i] = 0.0
    t0[0] = _t_grad(Z[0], aq, an, kappa, b, sdc, y, s, G[0])
    rep[0] = -1
    gap = (aq[r] - aq.min() + 2.0) / kappa if kappa > 0.0 else 12.0
    u, _, _ = _plane_optimum(dg, dg, False, -min(max(gap, 0.3), 12.0), 0.0, aq, an, kappa, b, sdc, y, zeta, s)
    for i in range(T):
        Z[1, i] = u * dg[i]
    t0[1] = _t_grad(Z[1], aq, an, kappa, b, sdc, y, s, G[1])
    rep[1] = -1
    K = 2
    if T < 3:  # two tokens: one contrast, the line above holds every design point
        return K
    ej = np.zeros(T)
    dj = np.empty(T)
    for g in range(n_groups):
        if g == anchor:
            continue
        j = members[offsets[g]]
        ej[j] = 1.0
        _centered(ej, dj)  # token j rising against all the others
        ej[j] = 0.0
        a = (aq[r] - aq[j] + 2.0) / (2.0 * kappa) if kappa > 0.0 else 12.0
        a = min(max(a, 0.3), 12.0)
        u, w, _ = _plane_optimum(dg, dj, True, -a, a, aq, an, kappa, b, sdc, y, zeta, s)
        for i in range(T):
            Z[K, i] = u * dg[i] + w * dj[i]
        # token j rising alone: the other end of the failure boundary's arc
        w, _, _ = _plane_optimum(dj, dj, False, 2.0 * a, 0.0, aq, an, kappa, b, sdc, y, zeta, s)
        for i in range(T):
            Z[K + 1, i] = w * dj[i]
        for h in range(2):
            t0[K + h] = _t_grad(Z[K + h], aq, an, kappa, b, sdc, y, s, G[K + h])
            rep[K + h] = g if offsets[g + 1] - offsets[g] > 1 else -1
        K += 2
    return K


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _tail_components(aq, an, kappa, b, sdc, y, N, defensive, floor, merge, max_beta, prune, members, offsets,
                     Z, G, t0, rep, off, beta, log_mass, A, counts, starts):  # fmt: skip
    """The importance components of one class (:mod:`attnsim.tail`): the
    design points (:func:`_design_points`), their linearizations t ~ off_k +
    G_k . zeta with indices beta_k = off_k / sqrt(1 + |G_k|^2) and FORM
    masses log Phi(-beta_k); merged (points closer than ``merge``: the one of
    smaller beta stays), without those beyond ``max_beta`` or with a mass
    below ``prune`` times the largest, in increasing beta. Their shares of
    the N points: ``defensive`` for N(0, I) (stratum 0), the rest in
    proportion to the masses, each at least ``floor`` of it. Writes the
    token groups (members, offsets: :func:`_token_groups`), the kept
    components into the first K rows of Z, G, rep, off, beta, log_mass and
    rows 1..K of A ((-G_k, 1) / sqrt(1 + |G_k|^2): the normal of the
    half-space whose truncation gives component k), the stratum sizes counts
    (K + 1) and their first points starts (K + 2); returns (K, number of groups)."""
    T = aq.size
    n_groups = _token_groups(aq, an, members, offsets)
    K0 = _design_points(aq, an, kappa, b, sdc, y, members, offsets, n_groups, Z, G, t0, rep)
    for k in range(K0):
        gz = 0.0
        gg = 0.0
        for i in range(T):
            gz += G[k, i] * Z[k, i]
            gg += G[k, i] * G[k, i]
        off[k] = t0[k] - gz
        beta[k] = off[k] / math.sqrt(1.0 + gg)
        if not (beta[k] < max_beta and math.isfinite(gg)):
            beta[k] = math.inf
    order = np.argsort(beta[:K0])
    kept = np.empty(K0, np.int64)
    K = 0
    for k in order:
        if not beta[k] < math.inf:
            break
        near = False
        for m in range(K):
            dist = 0.0
            for i in range(T):
                dist += (Z[k, i] - Z[kept[m], i]) ** 2
            near = near or dist <= merge * merge
        if not near:
            kept[K] = k
            K += 1
    Zk, Gk = Z[kept[:K]].copy(), G[kept[:K]].copy()  # gather, then write back in order
    ok_, bk, rk = off[kept[:K]].copy(), beta[kept[:K]].copy(), rep[kept[:K]].copy()
    for m in range(K):
        for i in range(T):
            Z[m, i] = Zk[m, i]
            G[m, i] = Gk[m, i]
        off[m], beta[m], rep[m] = ok_[m], bk[m], rk[m]
        log_mass[m] = _log_upper(bk[m])
    top = log_mass[0] if K > 0 else 0.0
    cut = top + math.log(prune)
    for m in range(K):
        if log_mass[m] < cut:
            K = m
            break
    tot = 0.0
    for m in range(K):
        tot += math.exp(log_mass[m] - top)
    tot_share = 0.0
    share = np.empty(K)
    for m in range(K):
        share[m] = max(math.exp(log_mass[m] - top) / tot, floor)
        tot_share += share[m]
    used = 0
    for m in range(K):
        counts[m + 1] = int(math.floor((1.0 - defensive) * share[m] / tot_share * N))
        used += counts[m + 1]
    counts[0] = N - used
    starts[0] = 0
    for m in range(K + 1):
        starts[m + 1] = starts[m] + counts[m]
    for m in range(K):
        gg = 0.0
        for i in range(T):
            gg += G[m, i] * G[m, i]
        norm = math.sqrt(1.0 + gg)
        for i in range(T):
            A[m + 1, i] = -G[m, i] / norm
        A[m + 1, T] = 1.0 / norm
    return K, n_groups


# Wichura's AS 241 (PPND16, Appl. Statist. 37, 477-484, 1988): the normal quantile to about
# 1e-16 relative, by rational functions in q = p - 1/2 (|q| <= 0.425) or in
# r = sqrt(-log(min(p, 1 - p))) (r <= 5, and beyond). Highest power first.
_AS241_A = (2.5090809287301226727e3, 3.3430575583588128105e4, 6.7265770927008700853e4,
            4.5921953931549871457e4, 1.3731693765509461125e4, 1.9715909503065514427e3,
            1.3314166789178437745e2, 3.3871328727963666080e0)  # fmt: skip
_AS241_B = (5.2264952788528545610e3, 2.8729085735721942674e4, 3.9307895800092710610e4,
            2.1213794301586595867e4, 5.3941960214247511077e3, 6.8718700749205790830e2,
            4.2313330701600911252e1, 1.0)  # fmt: skip
_AS241_C = (7.74545014278341407640e-4, 2.27238449892691845833e-2, 2.41780725177450611770e-1,
            1.27045825245236838258e0, 3.64784832476320460504e0, 5.76949722146069140550e0,
            4.63033784615654529590e0, 1.42343711074968357734e0)  # fmt: skip
_AS241_D = (1.05075007164441684324e-9, 5.47593808499534494600e-4, 1.51986665636164571966e-2,
            1.48103976427480074590e-1, 6.89767334985100004550e-1, 1.67638483018380384940e0,
            2.05319162663775882187e0, 1.0)  # fmt: skip
_AS241_E = (2.01033439929228813265e-7, 2.71155556874348757815e-5, 1.24266094738807843860e-3,
            2.65321895265761230930e-2, 2.96560571828504891230e-1, 1.78482653991729133580e0,
            5.46378491116411436990e0, 6.65790464350110377720e0)  # fmt: skip
_AS241_F = (2.04426310338993978564e-15, 1.42151175831644588870e-7, 1.84631831751005468180e-5,
            7.86869131145613259100e-4, 1.48753612908506148525e-2, 1.36929880922735805310e-1,
            5.99832206555887937690e-1, 1.0)  # fmt: skip


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", inline="always")
def _horner8(c, x):
    acc = (((c[0] * x + c[1]) * x + c[2]) * x + c[3]) * x + c[4]
    return ((acc * x + c[5]) * x + c[6]) * x + c[7]


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _normal_quantile(p, log_p):
    """Phi^{-1}(p) from p and its logarithm (AS 241; the tail from log_p, so
    p far below the smallest double is fine)."""
    if log_p < -2.5902671654458267:  # p < 0.075: the lower tail, from log p
        r = math.sqrt(-log_p)
    else:
        q = p - 0.5
        if abs(q) <= 0.425:
            r = 0.180625 - q * q
            return q * _horner8(_AS241_A, r) / _horner8(_AS241_B, r)
        r = math.sqrt(-math.log1p(-p))  # the upper tail
    if r <= 5.0:
        v = _horner8(_AS241_C, r - 1.6) / _horner8(_AS241_D, r - 1.6)
    else:
        v = _horner8(_AS241_E, r - 5.0) / _horner8(_AS241_F, r - 5.0)
    return -v if log_p < -0.6931471805599453 else v


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _truncated_normals(u, log_u, starts, K, log_mass, s):
    """s for the points of strata 1..K: normals truncated to > beta_k, by the
    inverse of their upper tail, s = -Phi^{-1}(u Phi(-beta_k)) (log Phi(-beta_k)
    = log_mass[k-1]; u in (0, 1] with its logarithm log_u)."""
    for k in range(1, K + 1):
        lm = log_mass[k - 1]
        scale = math.exp(lm)
        for n in range(starts[k], starts[k + 1]):
            s[n] = -_normal_quantile(u[n] * scale, log_u[n] + lm)


def normal_quantile(p: np.ndarray) -> np.ndarray:
    """Phi^{-1}(p) elementwise (1-d; as scipy.special.ndtri), by :func:`_normal_quantile`."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    with np.errstate(divide="ignore"):
        log_p = np.log(p)
    out = np.empty_like(p)
    starts = np.array([0, 0, p.size])
    _truncated_normals(p, log_p, starts, 1, np.zeros(1), out)
    return -out


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _tail_arguments(X, s, starts, A, rep, members, offsets, n_groups, aq, kappa, G, off, K, zeta, keep, E, U,
                    GU, c, s_work):  # fmt: skip
    """The importance points, folded into the fundamental domain D (each
    group's largest coordinate in its representative's place: the integrand
    is symmetric within groups), into zeta (T, N); keep (N,): 0 for a point of
    a component favouring group g's representative (rep[k] = g) that drew
    another member of g largest (outside D before folding: it counts with
    value 0), else 1. Then the arguments of the exponentials the estimate
    needs (NumPy takes them in place): the shifted logits aq + kappa zeta - max
    into E (T, N) and -u_k^2 / 2 into GU (K, N), with u_k = off_k + G_k . zeta,
    each component's linearized t, into U (K, N).

    The points of stratum k >= 1 (columns starts[k]..starts[k+1]-1) are
    X[:T] + (s - X . a) a[:T], a = A[k]: the (T+1)-dim normals X (T+1, N) with
    their coordinate along a replaced by s (drawn > beta_k), the last
    coordinate dropped; stratum 0 (defensive) is X[:T]. c, s_work: (N,) work arrays."""
    T, N = zeta.shape
    for k in range(K + 1):
        lo, hi = starts[k], starts[k + 1]
        cv = c[lo:hi]
        if k == 0:
            for n in range(hi - lo):
                cv[n] = 0.0
        else:
            sv = s[lo:hi]
            for n in range(hi - lo):
                cv[n] = sv[n]
            for t in range(T + 1):
                a = A[k, t]
                xv = X[t, lo:hi]
                for n in range(hi - lo):
                    cv[n] -= a * xv[n]
        for t in range(T):
            a = A[k, t]
            xv, zv = X[t, lo:hi], zeta[t, lo:hi]
            for n in range(hi - lo):
                zv[n] = xv[n] + cv[n] * a
        g_rep = rep[k - 1] if k > 0 else -1
        kv = keep[lo:hi]
        for n in range(hi - lo):
            kv[n] = 1.0
        for g in range(n_groups):  # fold: each group's largest coordinate into its first member's place
            first, last = offsets[g], offsets[g + 1]
            if last - first < 2:
                continue
            head = zeta[members[first], lo:hi]
            big, old = c[lo:hi], s_work[lo:hi]  # the running maximum; the first member's value
            for n in range(hi - lo):
                big[n] = head[n]
                old[n] = head[n]
            for m in range(first + 1, last):
                zv = zeta[members[m], lo:hi]
                for n in range(hi - lo):
                    big[n] = max(big[n], zv[n])
            for m in range(first + 1, last):  # the (first) largest member takes the first's old value
                zv = zeta[members[m], lo:hi]
                for n in range(hi - lo):
                    hit = zv[n] == big[n] and head[n] != big[n]
                    zv[n] = old[n] if hit else zv[n]
                    head[n] = big[n] if hit else head[n]
            if g == g_rep:  # a point of this component outside D before folding counts as 0
                for n in range(hi - lo):
                    kv[n] = 0.0 if old[n] != big[n] else kv[n]
    top = c  # reused: the largest logit of each point
    for n in range(N):
        top[n] = -math.inf
    for t in range(T):
        a, zv, ev = aq[t], zeta[t], E[t]
        for n in range(N):
            v = a + kappa * zv[n]
            ev[n] = v
            top[n] = max(top[n], v)
    for t in range(T):
        ev = E[t]
        for n in range(N):
            ev[n] -= top[n]
    for m in range(K):
        uv, gv = U[m], GU[m]
        o = off[m]
        for n in range(N):
            uv[n] = o
        for t in range(T):
            g, zv = G[m, t], zeta[t]
            for n in range(N):
                uv[n] += g * zv[n]
        for n in range(N):
            gv[n] = -0.5 * uv[n] * uv[n]


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _tail_prepare(aq, an, kappa, b, sdc_design, y, defensive, floor, merge, max_beta, prune, u, log_u, X,
                  members, offsets, Z, G, t0, rep, off, beta, log_mass, A, counts, starts, s, zeta, keep, E,
                  U, GU, c, s_work, factor):  # fmt: skip
    """One class of :mod:`attnsim.tail` up to the exponentials: its components
    (:func:`_tail_components`, designed with the value noise ``sdc_design``),
    their points' truncated coordinates (:func:`_truncated_normals`), the
    folded points and the exponentials' arguments (:func:`_tail_arguments`),
    and each component's factor in the mixture density on the fundamental
    domain (1, or 1/|g| for one favouring group g's first member). Returns
    the number of components K (0: every design point beyond ``max_beta``)."""
    N = X.shape[1]
    K, n_groups = _tail_components(aq, an, kappa, b, sdc_design, y, N, defensive, floor, merge, max_beta,
                                   prune, members, offsets, Z, G, t0, rep, off, beta, log_mass, A, counts,
                                   starts)  # fmt: skip
    if K == 0:
        return 0
    _truncated_normals(u, log_u, starts, K, log_mass, s)
    _tail_arguments(X, s, starts, A, rep, members, offsets, n_groups, aq, kappa, G, off, K, zeta, keep, E, U,
                    GU, c, s_work)  # fmt: skip
    for m in range(K):
        g = rep[m]
        factor[m] = 1.0 / (offsets[g + 1] - offsets[g]) if g >= 0 else 1.0
    return K


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _tail_finish(
    E, U, GU, zeta, an, b, sdc, y, keep, log_mass, factor, K, counts, starts, t, g, h, den, tail
):
    """One class of :mod:`attnsim.tail` from the exponentials on: t per point
    (:func:`_tail_t`), e^{-t^2/2}, and the estimate with its standard error
    (:func:`_tail_estimate`)."""
    _tail_t(E, zeta, an, b, sdc, y, t, g)
    for n in range(t.size):
        g[n] = math.exp(g[n])
    return _tail_estimate(t, g, keep, U, GU, log_mass, factor, K, counts, starts, h, den, tail)


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _tail_t(E, zeta, an, b, sdc, y, t, g):
    """t = y m / (sdc |s|) per point from E (T, N), the exponentials of the
    shifted logits (the softmax normalizer cancels), and -t^2 / 2 into g."""
    T, N = E.shape
    M = np.zeros(N)
    Q = np.zeros(N)
    for v in range(T):
        ev, zv = E[v], zeta[v]
        a = an[v]
        for n in range(N):
            e = ev[n]
            M[n] += e * (a + b * zv[n])
            Q[n] += e * e
    for n in range(N):
        tn = y * M[n] / (sdc * math.sqrt(Q[n]))
        t[n] = tn
        g[n] = -0.5 * tn * tn


@njit(cache=CACHE, fastmath=FASTMATH, error_model="numpy", nogil=True)
def _tail_estimate(t, g, keep, U, GU, log_mass, factor, K, counts, starts, h, den, tail):
    """The balance-heuristic estimate of one class's error with its standard
    error, from t and g = e^{-t^2/2} per (folded) point (the integrand
    h = Phi(-t), times keep) and each component's u_k (U (K, N)) with
    e^{-u_k^2/2} (GU): each point's term is h / den,
    den = n_0/N + sum_k factor_k (n_k/N) Phi(-u_k)/Phi(-beta_k), the mixture's
    density on the fundamental domain over M phi (factor_k = 1 for a
    component symmetric within groups, 1/|g| for one favouring group g's
    representative). The standard error is the root of sum over strata of
    n_k Var_k / N^2 (two passes, deviations in units of the estimate: squares
    of terms near 1e-200 would underflow). h, den, tail: (N,) work arrays;
    h ends holding the terms."""
    N = t.size
    _upper_tails(t, g, h)
    for n in range(N):
        den[n] = counts[0] / N
    for m in range(K):
        scale = factor[m] * counts[m + 1] / N * math.exp(-log_mass[m])
        _upper_tails(U[m], GU[m], tail)
        for n in range(N):
            den[n] += scale * tail[n]
    for n in range(N):
        h[n] = keep[n] * h[n] / den[n]
    total = 0.0
    for n in range(N):
        total += h[n]
    ref = total / N if total > 0.0 else 1.0
    var = 0.0
    for k in range(K + 1):
        lo, hi = starts[k], starts[k + 1]
        if hi - lo < 2:
            continue
        mean = 0.0
        for n in range(lo, hi):
            mean += h[n]
        mean /= hi - lo
        dev = 0.0
        for n in range(lo, hi):
            d = (h[n] - mean) / ref
            dev += d * d
        var += dev / (hi - lo - 1) * (hi - lo)
    return total / N, math.sqrt(var) / N * ref
