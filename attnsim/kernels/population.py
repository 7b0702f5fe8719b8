"""Numba kernels of the population metrics: the expected softplus of a
Gaussian for large standard deviations (everything else there is vectorized
NumPy in :mod:`attnsim.population`).

Every ``@njit`` function here calls only functions of this file.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._flags import CACHE, FASTMATH

N_CVZ = 14  # terms of the accelerated series (error below 4 * 5.83^-14 = 7e-11 relative)
_SQRT2 = math.sqrt(2.0)
_SQRTPI = math.sqrt(math.pi)
_SQRTPI_2 = math.sqrt(math.pi / 2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


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


@njit(cache=CACHE, fastmath=FASTMATH)
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


@njit(cache=CACHE, fastmath=FASTMATH)
def _taylor(x, sd, ex, lg):
    """E softplus(x + sd Z) by its Taylor series in sd^2 to eighth order, from
    ex = e^{-|x|} and lg = log(1 + ex) (computed by vectorized NumPy):

        sp(x) + sum_{k=1..4} sd^{2k} / (2^k k!) sp^(2k)(x),   sp(x) = max(x, 0) + lg,

    with v = sigma(x) (1 - sigma(x)) = ex / (1 + ex)^2 and the even derivatives
    sp^(2) = v, sp^(4) = v (1 - 6v), sp^(6) = v (1 - 30v + 120v^2),
    sp^(8) = v (1 - 126v + 1680v^2 - 5040v^3) (from sigma' = v,
    v' = v (1 - 2 sigma), (1 - 2 sigma)^2 = 1 - 4v). Within 2.2e-11 relative
    for sd <= 0.15 (tests/test_population.py).
    """
    v = ex / ((1.0 + ex) * (1.0 + ex))
    s2 = sd * sd
    t4 = s2 * s2 / 384.0 * (1.0 - 126.0 * v + 1680.0 * v * v - 5040.0 * v * v * v)
    t3 = s2 / 48.0 * (1.0 - 30.0 * v + 120.0 * v * v) + t4
    t2 = s2 / 8.0 * (1.0 - 6.0 * v) + s2 * t3
    return max(x, 0.0) + lg + s2 * v * (0.5 + t2)


@njit(cache=CACHE, fastmath=FASTMATH)
def _taylor_all(x, sd, ex, lg, out):
    for i in range(x.size):
        out[i] = _taylor(x[i], sd[i], ex[i], lg[i])


def taylor(x: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """:func:`_taylor` elementwise on 1-d arrays (sd <= 0.15 for 2e-11 relative)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    sd = np.ascontiguousarray(sd, dtype=np.float64)
    ex = np.exp(-np.abs(x))
    lg = np.log1p(ex)
    out = np.empty_like(x)
    _taylor_all(x, sd, ex, lg, out)
    return out


@njit(cache=CACHE, fastmath=FASTMATH, nogil=True)
def _scramble_sums(t, tail, x, sd, ex, lg, exact_loss, linear, taylor_sd, R, err, loss):
    """Per scramble r (points r*M .. (r+1)*M - 1): the mean over points and
    classes of the error Phi(-t) (``tail`` holds Phi(-t) for the points with
    |t| < 40, in order; beyond, 0 or 1) and of the expected loss: x itself
    for the linear loss; else :func:`_taylor` (from ex = e^{-|x|} and
    lg = log(1 + ex)) where sd <= ``taylor_sd``, and the next value of
    ``exact_loss`` where it is larger."""
    N = t.shape[1]
    M = N // R
    j = 0  # tail and exact_loss were taken from (2, N) arrays in row-major order:
    h = 0  # walk the points in that order (class, then point), scramble r = n // M
    for r in range(R):
        err[r] = 0.0
        loss[r] = 0.0
    for c in range(2):
        for r in range(R):
            e_acc = 0.0
            l_acc = 0.0
            for n in range(r * M, (r + 1) * M):
                tv = t[c, n]
                if abs(tv) < 40.0:
                    e_acc += tail[j]
                    j += 1
                elif tv < 0.0:
                    e_acc += 1.0
                if linear:
                    l_acc += x[c, n]
                elif sd[c, n] <= taylor_sd:
                    l_acc += _taylor(x[c, n], sd[c, n], ex[c, n], lg[c, n])
                else:
                    l_acc += exact_loss[h]
                    h += 1
            err[r] += e_acc
            loss[r] += l_acc
    for r in range(R):
        err[r] /= 2 * M
        loss[r] /= 2 * M


def scramble_sums(t, tail, x, sd, ex, lg, exact_loss, linear: bool, taylor_sd: float, R: int):
    """:func:`_scramble_sums`: per-scramble (error, loss) means, each (R,)."""
    err, loss = np.empty(R), np.empty(R)
    _scramble_sums(t, tail, x, sd, ex, lg, exact_loss, linear, float(taylor_sd), R, err, loss)
    return err, loss
