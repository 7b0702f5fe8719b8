"""Numba kernels of the population metrics' per-point terms (driven by
:mod:`.population`): the normal tail, the Taylor series of the expected
softplus, the per-point terms of the error and loss, and the tail estimator's
last step (:mod:`.tail`). The moments and the other expected-softplus rules
are in :mod:`.moment_kernels`, the tail's design points in :mod:`.design_kernels`
and its importance points in :mod:`.sample_kernels`.

The per-point kernels use arithmetic only (no libm call: the exponentials come
in from NumPy, whose exp is vectorized) and ``error_model="numpy"`` (no
division-by-zero checks), so their loops compile to SIMD instructions: the
normal tail costs about a fifth of scipy.special.ndtr here.

Every ``@njit`` function here calls only functions of this file.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ....runtime import numba_cache  # noqa: F401  (before any kernel loads)
from ....runtime.numba_cache import CACHE, ERROR_MODEL, FASTMATH

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
_P1 = (
    1.85777706184603153e-1,
    3.16112374387056560e00,
    1.13864154151050156e02,
    3.77485237685302021e02,
    3.20937758913846947e03,
)
_Q1 = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03)
_P2 = (
    2.15311535474403846e-8,
    5.64188496988670089e-1,
    8.88314979438837594e00,
    6.61191906371416295e01,
    2.98635138197400131e02,
    8.81952221241769090e02,
    1.71204761263407058e03,
    2.05107837782607147e03,
    1.23033935479799725e03,
)
_Q2 = (
    1.57449261107098347e01,
    1.17693950891312499e02,
    5.37181101862009858e02,
    1.62138957456669019e03,
    3.29079923573345963e03,
    4.36261909014324716e03,
    3.43936767414372164e03,
    1.23033935480374942e03,
)
_P3 = (
    1.63153871373020978e-2,
    3.05326634961232344e-1,
    3.60344899949804439e-1,
    1.25781726111229246e-1,
    1.60837851487422766e-2,
    6.58749161529837803e-4,
)
_Q3 = (
    2.56852019228982242e00,
    1.87295284992346047e00,
    5.27905102951428412e-1,
    6.05183413124413191e-2,
    2.33520497626869185e-3,
)


# Horner's rule written out for each length (a loop over the coefficient tuple
# is not always unrolled once inlined into a SIMD loop, and then each lane
# gathers the coefficients from memory: 3x slower).


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _horner5(c, x):
    return (((c[0] * x + c[1]) * x + c[2]) * x + c[3]) * x + c[4]


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _horner6(c, x):
    return ((((c[0] * x + c[1]) * x + c[2]) * x + c[3]) * x + c[4]) * x + c[5]


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _horner9(c, x):
    acc = (((c[0] * x + c[1]) * x + c[2]) * x + c[3]) * x + c[4]
    return (((acc * x + c[5]) * x + c[6]) * x + c[7]) * x + c[8]


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _monic4(c, x):
    """x^4 + c[0] x^3 + ... + c[3]."""
    return (((x + c[0]) * x + c[1]) * x + c[2]) * x + c[3]


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _monic5(c, x):
    return ((((x + c[0]) * x + c[1]) * x + c[2]) * x + c[3]) * x + c[4]


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _monic8(c, x):
    acc = (((x + c[0]) * x + c[1]) * x + c[2]) * x + c[3]
    return (((acc * x + c[4]) * x + c[5]) * x + c[6]) * x + c[7]


SMALL_A, MID_A = (
    0.46875,
    4.0,
)  # a = |t| / sqrt 2 below SMALL_A: Cody's erf; up to MID_A: his erfc; beyond: asymptotic
TAIL_BLOCK = 256  # points per block of _upper_tails (a block computes only the ranges its points need)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _tail_small(a):
    z = a * a
    return 0.5 - 0.5 * a * _horner5(_P1, z) / _monic4(_Q1, z)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _tail_mid(a, g):
    return 0.5 * g * _horner9(_P2, a) / _monic8(_Q2, a)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _tail_far(a, g):
    w = 1.0 / max(a * a, 16.0)
    p3 = w * _horner6(_P3, w)
    q3 = _monic5(_Q3, w)
    return 0.5 * g * (_INV_SQRTPI * q3 - p3) / (a * q3)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _signed_tail(t, v):
    """Phi(-t) from v = Phi(-|t|); exactly 0 or 1 for |t| >= 40 (and NaN)."""
    v = v if t >= 0.0 else 1.0 - v
    return v if math.fabs(t) < 40.0 else (1.0 if t < 0.0 else 0.0)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _small_or_mid(t, g):
    a = math.fabs(t) * _SQRT1_2
    return _tail_small(a) if a < SMALL_A else _tail_mid(a, g)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _taylor(x, sd, ex):
    """E softplus(x + sd Z) by its Taylor series in sd^2 to eighth order, from
    ex = e^{-|x|} (computed by vectorized NumPy) and lg = log(1 + ex):

        sp(x) + sum_{k=1..4} sd^{2k} / (2^k k!) sp^(2k)(x),   sp(x) = max(x, 0) + lg,

    with v = sigma(x) (1 - sigma(x)) = ex / (1 + ex)^2 and the even derivatives
    sp^(2) = v, sp^(4) = v (1 - 6v), sp^(6) = v (1 - 30v + 120v^2),
    sp^(8) = v (1 - 126v + 1680v^2 - 5040v^3) (from sigma' = v,
    v' = v (1 - 2 sigma), (1 - 2 sigma)^2 = 1 - 4v). Within 2.2e-11 relative
    for sd <= 0.15 (tests/test_attention_population.py).
    """
    lg = _log1p_unit(ex)
    v = ex / ((1.0 + ex) * (1.0 + ex))
    s2 = sd * sd
    t4 = s2 * s2 / 384.0 * (1.0 - 126.0 * v + 1680.0 * v * v - 5040.0 * v * v * v)
    t3 = s2 / 48.0 * (1.0 - 30.0 * v + 120.0 * v * v) + t4
    t2 = s2 / 8.0 * (1.0 - 6.0 * v) + s2 * t3
    return max(x, 0.0) + lg + s2 * v * (0.5 + t2)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
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


def point_terms(
    t: np.ndarray,
    x: np.ndarray,
    sd: np.ndarray,
    linear: bool,
    taylor: bool = True,
    work: np.ndarray | None = None,
    error: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
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


@njit(cache=CACHE, fastmath=FASTMATH, nogil=True, error_model=ERROR_MODEL)
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _tail_finish(
    E, U, GU, zeta, an, b, sdc, y, keep, log_mass, factor, K, counts, starts, t, g, h, den, tail, sig, LR
):
    """One class of :mod:`.tail` from the exponentials on: t per point
    (:func:`_tail_t`), e^{-t^2/2}, and the estimate with its standard error
    (:func:`_tail_estimate`)."""
    _tail_t(E, zeta, an, b, sdc, y, t, g)
    for n in range(t.size):
        g[n] = math.exp(g[n])
    return _tail_estimate(t, g, keep, U, GU, log_mass, factor, K, counts, starts, h, den, tail, sig, LR)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, nogil=True)
def _tail_estimate(t, g, keep, U, GU, log_mass, factor, K, counts, starts, h, den, tail, sig, LR):
    """The balance-heuristic estimate of one class's error with its standard
    error, from t and g = e^{-t^2/2} per (folded) point (the integrand
    h = Phi(-t), times keep) and each component's u_k (U (K, N)) with
    e^{-u_k^2/2} (GU): each point's term is h / den,
    den = n_0/N + sum_k factor_k (n_k/N) Phi(-u_k)/Phi(-beta_k), the mixture's
    density on the fundamental domain over M phi (factor_k = 1 for a
    component symmetric within groups, 1/|g| for one favouring group g's
    representative), times e^LR_k for a widened copy (sig_k > 1). The standard error is the
    root of sum over strata of
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
        if sig[m] > 1.0:  # a widened copy: its density's other factor, e^LR
            lr = LR[m]
            for n in range(N):
                den[n] += scale * tail[n] * math.exp(lr[n])
        else:
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
