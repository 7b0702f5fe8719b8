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
def _point_terms(t, g, x, sd, ex, loss_rule, err, loss):
    """Per point: the error Phi(-t) (from g = e^{-t^2/2}) and the expected
    loss by ``loss_rule``: LOSS_LINEAR (x itself), LOSS_TAYLOR (:func:`_taylor`
    from ex = e^{-|x|}; meaningful where sd <= TAYLOR_SD, the caller replaces
    the rest) or LOSS_NONE (left to the caller)."""
    _upper_tails(t, g, err)
    if loss_rule == LOSS_LINEAR:
        for i in range(t.size):
            loss[i] = x[i]
    elif loss_rule == LOSS_TAYLOR:
        for i in range(t.size):
            loss[i] = _taylor(x[i], sd[i], ex[i])


def point_terms(t: np.ndarray, x: np.ndarray, sd: np.ndarray, linear: bool, taylor: bool = True,
                work: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """:func:`_point_terms` on arrays of one shape: (error, loss) per point;
    without ``taylor`` the logistic loss is left for the caller. ``work``: a
    reused (4, t.size) array the results and temporaries are written to."""
    shape = t.shape
    t, x, sd = (np.ascontiguousarray(a, dtype=np.float64).reshape(-1) for a in (t, x, sd))
    g, ex, err, loss = np.empty((4, t.size)) if work is None else work
    with np.errstate(over="ignore", invalid="ignore"):  # t^2 may overflow: g = 0 then, as it should
        np.multiply(t, t, out=g)
        np.multiply(g, -0.5, out=g)
        np.exp(g, out=g)
    rule = LOSS_LINEAR if linear else LOSS_TAYLOR if taylor else LOSS_NONE
    if rule == LOSS_TAYLOR:
        np.abs(x, out=ex)
        np.negative(ex, out=ex)
        np.exp(ex, out=ex)
    _point_terms(t, g, x, sd, ex, rule, err, loss)
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
