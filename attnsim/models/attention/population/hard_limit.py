"""The hard-attention limit of the population metrics (SPEC §13): as |q| grows along a
direction the softmax becomes an argmax, and every metric is a sum over tokens of
one-dimensional integrals, done by quadrature around each integrand's maximum."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import log_ndtr


def _log_integral(logf, dlogf, lo: float, hi: float, breaks: tuple[float, ...] = ()) -> tuple[float, float]:
    """log of the integral of e^{logf} over (lo, hi) for a concave logf with
    logf'' <= -1 (a log-concave density times a standard normal), and its
    relative error bound: the integrand is scaled by its maximum over (lo, hi)
    (bisection on dlogf), integrated by adaptive quadrature over 13 units either
    side of it (beyond, it falls faster than e^{-x^2/2}: the rest is below
    1e-37 of the whole), with ``breaks`` (kinks) passed to the quadrature."""
    from scipy.integrate import quad  # lazy: start-up; only the hard-attention limit integrates

    a, b = -60.0, 60.0
    if dlogf(a) <= 0.0:
        top = a
    elif dlogf(b) >= 0.0:
        top = b
    else:
        for _ in range(200):
            mid = 0.5 * (a + b)
            if dlogf(mid) > 0.0:
                a = mid
            else:
                b = mid
            if b - a < 1e-12:
                break
        top = 0.5 * (a + b)
    top = min(max(top, lo), hi)  # the maximum over (lo, hi)
    lo, hi = max(lo, top - 13.0), min(hi, top + 13.0)
    if not lo < hi:
        return -math.inf, 0.0
    ref = logf(top)
    pts = [x for x in breaks if lo < x < hi]
    val, abserr = quad(
        lambda x: math.exp(logf(x) - ref), lo, hi, points=pts or None, epsabs=0.0, epsrel=1e-11, limit=200
    )
    if not val > 0.0:
        return -math.inf, 0.0
    return ref + math.log(val), abserr / val + 1e-13


def hard_limit_terms(delta: np.ndarray, anu: np.ndarray, b: float, sdc: float, y: float) -> tuple:
    """For one class of the hard-attention limit, with standardized mean logits
    delta (T,) (a_t . q / (sigma |q|)) and mean values anu (T,): per token j, the
    probability that j has the largest logit,

        P_j = int phi(x) prod_{t != j} Phi(x + delta_j - delta_t) dx

    (condition on zeta_j = x; the other tokens are independent), and the
    probability that j is selected and the sample misclassified, the same
    integral with the factor Phi(-y (anu_j + b x) / sdc) (the value of token j
    given zeta_j = x is Gaussian with that mean and sd sdc; a step when
    sdc = 0). Every integrand is log-concave with log'' <= -1, so each is
    integrated around its maximum to ~1e-11 relative however small it is.
    Returns (P, its bound, error terms, their bound), each (T,)."""
    T = delta.size
    sel, sel_b, err, err_b = (np.zeros(T) for _ in range(4))
    for j in range(T):
        d = np.delete(delta[j] - delta, j)

        def log_sel(x, d=d):
            return -0.5 * x * x + float(np.sum(log_ndtr(x + d)))

        def dlog_sel(x, d=d):
            return -x + float(np.sum(_mills_neg(x + d)))

        lp, rel = _log_integral(log_sel, dlog_sel, -math.inf, math.inf)
        sel[j] = math.exp(lp - 0.5 * math.log(2.0 * math.pi))
        sel_b[j] = sel[j] * rel
        if sdc > 0.0:

            def log_err(x, lj=log_sel, j=j):
                return lj(x) + float(log_ndtr(-y * (anu[j] + b * x) / sdc))

            def dlog_err(x, dj=dlog_sel, j=j):
                return dj(x) - y * b / sdc * float(_mills_neg(-y * (anu[j] + b * x) / sdc))

            le, rel = _log_integral(log_err, dlog_err, -math.inf, math.inf)
        else:  # the value is exact: misclassified where y (anu_j + b x) < 0
            if b == 0.0:
                wrong = 1.0 if y * anu[j] < 0.0 else 0.5 if anu[j] == 0.0 else 0.0
                le, rel = (lp + math.log(wrong), rel) if wrong > 0.0 else (-math.inf, 0.0)
            else:
                x0 = -anu[j] / b
                lo, hi = (x0, math.inf) if -y * b > 0.0 else (-math.inf, x0)
                le, rel = _log_integral(log_sel, dlog_sel, lo, hi, breaks=(x0,))
        err[j] = math.exp(le - 0.5 * math.log(2.0 * math.pi))
        err_b[j] = err[j] * rel
    return sel, sel_b, err, err_b


def _mills_neg(x):
    """phi(x) / Phi(x), the derivative of log Phi(x), without overflow."""
    x = np.asarray(x, dtype=np.float64)
    return np.exp(-0.5 * x * x - log_ndtr(x)) / math.sqrt(2.0 * math.pi)
