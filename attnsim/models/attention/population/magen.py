"""Population metrics of data_model = magen2025 (Magen et al. 2025; SPEC §15).

A fresh clean sample has T = 2 tokens: the signal token y mu, exactly, and a
noise token xi ~ N(0, sigma^2 (I - P_mu)) (their order does not matter to
attention). With q = W p and nu, the signal token's logit and value are
y a and y e (a = q.mu, e = nu.mu); the noise token's (z, u) is a 2-D Gaussian
with covariance sigma^2 [[A, B], [B, C]] of the parts of q and nu orthogonal
to mu. Writing z = sigma sqrt(A) zeta and u = b zeta + c eta (b = sigma B /
sqrt(A), c = sigma sqrt(C - B^2/A)), the signal token's score is s1 =
sigmoid(Delta), Delta = y a - sigma sqrt(A) zeta, and

    y f | zeta ~ N(s1 e + y s2 b zeta, (s2 c)^2),
    P(y f < 0) = E_zeta Phi(-(e^Delta e + y b zeta) / c).

Every metric is a one-dimensional integral over zeta, done by adaptive
quadrature (SciPy's QUADPACK): the error's integrand in log form around its
largest point, so an error of 1e-200 is as exact as one of 0.3. The standard
error reported is QUADPACK's error estimate, a deterministic bound of the
same size, not a sampling error; a tie f = 0 counts one half.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.integrate import quad
from scipy.special import expit, log_ndtr

from .loss import expected_softplus
from .tail import RESOLVED_REL

SPAN = 40.0  # zeta in [-SPAN, SPAN]: the Gaussian's mass outside is below 1e-340
GRID = np.linspace(-SPAN, SPAN, 8001)  # where the error's integrand is first located
TINY_SD = 1e-300  # a conditional sd of 0 (f given zeta exact): Phi becomes the indicator
UNDERFLOW_BOUND = 1e-300  # an error below float64's range is reported as this upper bound, unresolved
LOG_PHI0 = -0.5 * math.log(2.0 * math.pi)
METHOD = "one-dimensional adaptive quadrature over the noise token's logit (data_model magen2025)"


class MagenPopulation:
    """The population of data_model magen2025 for noise level ``sigma`` and the
    loss; :meth:`evaluate` takes the seven scalars of
    :meth:`attnsim.models.attention.population.Population.evaluate`."""

    method = METHOD

    def __init__(self, sigma: float, signal_norm: float, loss: str = "logistic"):
        self.sigma, self.m, self.loss = float(sigma), float(signal_norm), loss

    def evaluate(self, q_mu_pos, q_mu_neg, q_nu, qq, nu_mu_pos, nu_mu_neg, nunu) -> dict:
        m, sig = self.m, self.sigma
        a, e = q_mu_pos, nu_mu_pos  # class +1's signal token is +mu, class -1's -mu
        A = max(qq - (a / m) ** 2, 0.0)
        B = q_nu - (a / m) * (e / m)
        C = max(nunu - (e / m) ** 2, 0.0)
        sA = sig * math.sqrt(A)
        b = sig * B / math.sqrt(A) if A > 0 else 0.0
        c = sig * math.sqrt(max(C - B * B / A, 0.0)) if A > 0 else sig * math.sqrt(C)
        err, err_abs, loss, s1 = 0.0, 0.0, 0.0, 0.0
        for y in (1.0, -1.0):
            E, Eabs = _error(y * a, e, y * b, max(c, TINY_SD), sA)
            err, err_abs = err + E / 2, err_abs + Eabs / 2
            loss += _bulk(lambda z, y=y: self._loss(y * a, e, y * b, c, sA, z), y * a, sA) / 2
            s1 += _bulk(lambda z, y=y: expit(y * a - sA * z), y * a, sA) / 2
        resolved = err > 0.0 and err_abs <= RESOLVED_REL * err or err == 0.0 and err_abs == 0.0
        if not resolved:  # underflowed (below float64's range) or too uncertain: an upper bound, flagged
            err, err_abs = max(err + 3.0 * err_abs, UNDERFLOW_BOUND), math.nan
        return {
            "pop_error": err,
            "pop_error_se": err_abs,
            "pop_error_resolved": float(resolved),
            "pop_loss": loss,
            "pop_score_relevant": s1,
            "pop_score_weak_aligned": 0.0,
            "pop_score_weak_opposite": 0.0,
            "pop_score_irrelevant": 1.0 - s1,
        }

    def _loss(self, ya, e, yb, c, sA, z):
        """E[loss | zeta = z] of one class (y folded into ya, yb)."""
        s1 = expit(ya - sA * z)
        mean = s1 * e + (1.0 - s1) * yb * z  # of y f
        if self.loss == "linear":
            return -mean
        return expected_softplus(-mean, (1.0 - s1) * c)


def _log_error_integrand(z, ya, e, yb, c, sA):
    """log( Phi(-(e^Delta e + yb z)/c) phi(z) ), Delta = ya - sA z."""
    delta = np.minimum(ya - sA * z, 700.0)  # e^700 e overflows nothing; beyond, Phi's argument is -inf anyway
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # +-inf arguments are exact limits
        return log_ndtr(-(np.exp(delta) * e + yb * z) / c) + LOG_PHI0 - 0.5 * z * z


def _error(ya, e, yb, c, sA) -> tuple[float, float]:
    """P(y f < 0) of one class and QUADPACK's absolute error estimate."""
    if sA == 0.0 and yb == 0.0:  # the integrand is Phi(const) phi(z): closed form
        log_p = float(log_ndtr(-(math.exp(min(ya, 700.0)) * e) / c))
        if -math.inf < log_p < -700.0:  # exact, but below float64's range
            return 0.0, UNDERFLOW_BOUND
        return math.exp(log_p), 0.0
    L = _log_error_integrand(GRID, ya, e, yb, c, sA)
    j = int(np.argmax(L))
    top = float(L[j])
    if not math.isfinite(top):  # the integrand is 0 everywhere: exactly no error
        return 0.0, 0.0
    if top < -700.0:  # below e^-700 * 2 SPAN: not representable, so 0 with that bound (flagged by the caller)
        return 0.0, UNDERFLOW_BOUND
    breaks = sorted({float(GRID[j]), *([min(max(ya / sA, -SPAN), SPAN)] if sA > 0 else [])})

    def rel(z):
        return math.exp(float(_log_error_integrand(z, ya, e, yb, c, sA)) - top)

    val, abserr = quad(rel, -SPAN, SPAN, points=breaks, epsabs=0.0, epsrel=1e-10, limit=400)
    scale = math.exp(top)
    return val * scale, abserr * scale


def _bulk(g, ya, sA) -> float:
    """E g(zeta) of a bounded quantity: quadrature against the normal density,
    split at the sigmoid's centre (where g may turn like a step)."""
    breaks = [min(max(ya / sA, -SPAN), SPAN)] if sA > 0 else []

    def weighted(z):
        return float(g(z)) * math.exp(LOG_PHI0 - 0.5 * z * z)

    val, _ = quad(weighted, -SPAN, SPAN, points=breaks or None, epsabs=1e-13, epsrel=1e-11, limit=400)
    return val
