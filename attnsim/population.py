"""Exact population metrics of a fresh clean sample (SPEC §5).

Given q = W p and nu, each token's (z_t, u_t) = (x_t . q, x_t . nu) of a fresh
sample is a 2-D Gaussian with mean (a_t . q, a_t . nu), a_t the token's mean
vector, and covariance sigma^2 [[|q|^2, q.nu], [q.nu, |nu|^2]]; tokens are
independent. Writing z_t = a_t.q + sigma |q| zeta_t with zeta ~ N(0, I_T),

    f | zeta ~ N( sum_t s_t (a_t.nu + sigma (q^.nu) zeta_t),
                  sigma^2 (|nu|^2 - (q^.nu)^2) sum_t s_t^2 ),   q^ = q/|q|,

so P(y f < 0) = E_zeta[Phi(-y mean / sd)]: a T-dimensional Gaussian integral,
done by randomized quasi-Monte Carlo over zeta (``N_SCRAMBLES`` independent
scrambles of a Sobol sequence, drawn once per run; the standard error comes
from the spread of the scramble means). The expected loss adds a Gauss-Hermite
average over f (as many nodes as the conditional sd needs); the expected
score of each role comes from the same points.
At q = 0 attention is uniform and the integrand is constant: the closed form
Phi(-|mu| / (sigma sqrt(2T))) (default roles) comes out exactly with error 0.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri
from scipy.stats import qmc

from . import kernels
from .data import ROLE_NAMES, role_coefficients

N_SCRAMBLES = 8
N_HERMITE_MAX = 32  # nodes are chosen per point from the conditional sd


def sobol_normals(T: int, points: int, rng) -> np.ndarray:
    """(N_SCRAMBLES, points / N_SCRAMBLES, T) standard normals from independent
    scrambles of a Sobol sequence (``rng``: the run's population stream)."""
    m = int(np.log2(max(points // N_SCRAMBLES, 1)))
    zeta = np.empty((N_SCRAMBLES, 2**m, T))
    for i in range(N_SCRAMBLES):
        u = qmc.Sobol(d=T, scramble=True, seed=rng).random_base2(m)
        zeta[i] = ndtri(np.clip(u, 1e-16, 1 - 1e-16))
    return zeta


_ZETA_CACHE: dict = {}


def cached_sobol_normals(seed: int, T: int, points: int, rng) -> np.ndarray:
    """:func:`sobol_normals` for a run whose population stream comes from
    ``seed`` (the stream is used for nothing else, so the points depend only
    on seed, T and points); sweeps reuse them across runs."""
    key = (seed, T, points)
    if key not in _ZETA_CACHE:
        if len(_ZETA_CACHE) > 16:
            _ZETA_CACHE.clear()
        _ZETA_CACHE[key] = sobol_normals(T, points, rng)
    return _ZETA_CACHE[key]


class Population:
    """Population metrics for one role layout and noise level.

    Parameters
    ----------
    roles : (T,) role code of each token of a fresh sample.
    rho : weak-relevance factor.  sigma : token noise sd.
    points : total number of QMC points (split over ``N_SCRAMBLES`` scrambles).
    rng : the run's population stream.
    """

    def __init__(self, roles, rho: float, sigma: float, points: int, rng, loss: str = "logistic", zeta=None):
        self.roles = np.asarray(roles, dtype=np.int64)
        T = self.roles.size
        self.rho, self.sigma, self.loss = float(rho), float(sigma), loss
        self.zeta = sobol_normals(T, points, rng) if zeta is None else zeta
        self.gh_x, self.gh_w = kernels.hermite_table(N_HERMITE_MAX)
        # token mean a_t = c_own * mu_y + c_other * mu_{-y}
        self.c_own, self.c_other = role_coefficients(self.roles, rho)

    def evaluate(self, q_mu_pos, q_mu_neg, q_nu, qq, nu_mu_pos, nu_mu_neg, nunu) -> dict:
        """Error (with standard error), loss and per-role scores from the scalars
        q.mu+, q.mu-, q.nu, |q|^2, nu.mu+, nu.mu-, |nu|^2."""
        sig = self.sigma
        aq = np.stack(
            [
                self.c_own * q_mu_pos + self.c_other * q_mu_neg,
                self.c_own * q_mu_neg + self.c_other * q_mu_pos,
            ]
        )
        anu = np.stack(
            [
                self.c_own * nu_mu_pos + self.c_other * nu_mu_neg,
                self.c_own * nu_mu_neg + self.c_other * nu_mu_pos,
            ]
        )
        qn = float(np.sqrt(max(qq, 0.0)))
        if qn > 0.0:
            qhat_nu = q_nu / qn
            b = sig * qhat_nu
            sdc = sig * np.sqrt(max(nunu - qhat_nu**2, 0.0))
        else:  # uniform attention: the integrand does not depend on zeta
            b, sdc = 0.0, sig * np.sqrt(max(nunu, 0.0))
        err, loss, score = kernels.population_eval(
            self.zeta, aq, anu, sig * qn, b, sdc, self.gh_x, self.gh_w, self.loss
        )
        out = {
            "pop_error": float(err.mean()),
            "pop_error_se": float(err.std(ddof=1) / np.sqrt(err.size)),
            "pop_loss": float(loss.mean()),
        }
        for code, name in enumerate(ROLE_NAMES):
            out[f"pop_score_{name}"] = float(score[self.roles == code].sum())
        return out


def uniform_error(signal_norm: float, sigma: float, T: int) -> float:
    """Closed-form population error at q = 0 for the default roles (SPEC §3)."""
    from scipy.special import ndtr

    return float(ndtr(-signal_norm / (sigma * np.sqrt(2 * T))))
