"""Lu, Letey, Zavatone-Veth, Maiti and Pehlevan's asymptotic theory of in-context learning by linear
attention (PNAS 2025): the errors e_ICL and e_IDG of the ridge-regression endpoint at d -> infinity
with alpha = l/d, kappa = k/d, tau = n/d^2, rho (label noise) and lambda (ridge) fixed.

Their results, as written in the paper and evaluated by their release's theory_runs/common.py:

- x* = (1 + rho)/alpha; the Stieltjes transform of a Wishart (Marchenko-Pastur) law of ratio nu,
  S(x; nu) = 2 / ((x + 1 - 1/nu) + sqrt((x + 1 - 1/nu)^2 + 4 x / nu)), and M_kappa(x) = S(x; kappa);
- ridgeless (lambda -> 0): e_ICL and e_IDG in closed form on either side of the interpolation
  threshold tau = 1 (:func:`ridgeless`);
- ridge: e_ICL through eps, the smallest positive root of the self-consistency
  1 - tau + tau lambda / eps - eps S(eps + x*; kappa) = 0 (their ``fsolve`` from 100 starts, the
  smallest positive answer kept; here a bracketing search on a logarithmic grid and Brent's
  method, which reports when no root is bracketed) (:func:`ridge_icl`).

kappa = inf (a fresh task per sequence) is the limit 1/kappa = 0 of every formula.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.optimize import brentq


class TheoryPoint(NamedTuple):
    e_icl: float | None
    e_idg: float | None
    eps: float | None = None  # the ridge self-consistency's root (ridge > 0)
    message: str = ""  # why a value is missing


def _inv(kappa: float) -> float:
    return 0.0 if math.isinf(kappa) else 1.0 / kappa


def stieltjes(x: float, nu: float) -> float:
    """S(x; nu) = 2 / ((x + 1 - 1/nu) + sqrt((x + 1 - 1/nu)^2 + 4 x / nu)): Wishart of ratio nu."""
    a = x + 1.0 - _inv(nu)
    return 2.0 / (a + math.sqrt(a * a + 4.0 * x * _inv(nu)))


def stieltjes_derivative(x: float, nu: float) -> float:
    """dS/dx = -S^2 (1 + (x + 1 + 1/nu) / sqrt((x + 1 - 1/nu)^2 + 4 x / nu)) / 2."""
    s = stieltjes(x, nu)
    a = x + 1.0 - _inv(nu)
    return -0.5 * s * s * (1.0 + (x + 1.0 + _inv(nu)) / math.sqrt(a * a + 4.0 * x * _inv(nu)))


def ridgeless(alpha: float, kappa: float, tau: float, rho: float) -> TheoryPoint:
    """e_ICL and e_IDG of the ridgeless endpoint (lambda -> 0); they diverge at tau = 1."""
    if tau == 1.0:
        return TheoryPoint(
            None, None, None, "tau = 1: the ridgeless errors diverge at the interpolation threshold"
        )
    x = (1.0 + rho) / alpha
    m = stieltjes(x, kappa)
    mu = x * stieltjes(x, kappa / tau)
    if tau < 1:
        icl = (
            tau * (1 + x) / (1 - tau) * (1 - tau * (1 - mu) ** 2 - (x - rho) / x * mu)
            - 2 * tau * (1 - mu)
            + rho
            + 1
        )
        e = (1 - tau) * x / (tau * mu)
        c = 1.0 if math.isinf(kappa) else 1.0 / (1.0 - kappa / (1.0 + kappa * e / (1.0 - tau)) ** 2)
        idg = tau * (
            (x + e) ** 2 / e + (rho + x - 2 * x * (1 - tau) * (x / e + 1)) / (1 - tau - c * (1 - tau) ** 2)
        )
    else:
        k_star = 1.0 if math.isinf(kappa) else 1.0 / (1.0 - kappa * (m / (kappa + m)) ** 2)
        t1 = (k_star - 1.0 / (tau - 1)) * (1 + x) * (x * m) ** 2
        t2 = (3 - 2 * tau) / (tau - 1) * m * x * x
        t3 = ((1 + rho) / (tau - 1) * m + 1) * x + rho * m / (tau - 1) + rho
        icl = t1 + t2 + t3
        idg = tau * (rho + x * (1 - x * m)) / (tau - 1)
    return TheoryPoint(float(icl), float(idg))


def _self_consistency(eps: float, x: float, tau: float, kappa: float, lam: float) -> float:
    return 1.0 - tau + tau * lam / eps - eps * stieltjes(eps + x, kappa)


def ridge_eps(alpha: float, kappa: float, tau: float, rho: float, lam: float) -> float | None:
    """The smallest positive root eps of the ridge self-consistency (None: none bracketed on
    eps in [1e-12, 1e8])."""
    x = (1.0 + rho) / alpha
    grid = np.geomspace(1e-12, 1e8, 801)
    vals = np.array([_self_consistency(e, x, tau, kappa, lam) for e in grid])
    for i in range(grid.size - 1):
        if vals[i] == 0.0:
            return float(grid[i])
        if vals[i] * vals[i + 1] < 0.0:
            return float(brentq(_self_consistency, grid[i], grid[i + 1], args=(x, tau, kappa, lam),
                                xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=200))  # fmt: skip
    return None


def ridge_icl(
    alpha: float, kappa: float, tau: float, rho: float, lam: float, published: bool = False
) -> TheoryPoint:
    """e_ICL of the ridge endpoint (lambda > 0) from the self-consistency's root (their e_IDG for
    lambda > 0 is not in the release: None). ``published``: the root rounded to 6 decimals, as
    their release uses it (np.round(solutions, 6)): near tau = 1, where eps is about 1e-4, that
    moves e_ICL by up to 3e-5 relative and leaves a self-consistency residual of 1e-3."""
    eps = ridge_eps(alpha, kappa, tau, rho, lam)
    if eps is not None and published:
        eps = round(eps, 6)
    if eps is None:
        return TheoryPoint(
            None, None, None, "the ridge self-consistency has no root bracketed in [1e-12, 1e8]"
        )
    x = (1.0 + rho) / alpha
    nu = x + eps
    S, dS = stieltjes(nu, kappa), stieltjes_derivative(nu, kappa)
    c_e = (rho + nu - nu * nu * S - eps * (1 - 2 * nu * S - nu * nu * dS)) / (
        1 - 2 * eps * S - eps * eps * dS - tau
    )
    icl = (x + 1) * (1 - 2 * nu * S - nu * nu * dS - c_e * (S + eps * dS)) - 2 * (1 - nu * S) + 1 + rho
    return TheoryPoint(float(icl), None, float(eps))


def theory(
    alpha: float, kappa: float, tau: float, rho: float, lam: float, published: bool = False
) -> TheoryPoint:
    """The asymptotic errors at (alpha, kappa, tau, rho, lambda): ridgeless for lambda = 0, ridge
    otherwise (``published``: the ridge root as their release rounds it)."""
    if lam == 0:
        return ridgeless(alpha, kappa, tau, rho)
    return ridge_icl(alpha, kappa, tau, rho, lam, published)
