"""Slow, obviously-correct references that the fast code is tested against.

Population error of one class (SPEC §5): with standardized logit noises
zeta ~ N(0, I_T), logits aq + kappa zeta, token values an + b zeta plus
independent noise of sd sdc, the error is E[Phi(-t(zeta))],
t = y m / (sdc |s|), m = s . (an + b zeta), s = softmax(aq + kappa zeta).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import integrate, optimize
from scipy.special import log_ndtr


def log_error_integrand(zeta, aq, an, kappa, b, sdc, y):
    """log Phi(-t(zeta)) for points zeta (..., T)."""
    z = aq + kappa * zeta
    s = np.exp(z - z.max(axis=-1, keepdims=True))
    s /= s.sum(axis=-1, keepdims=True)
    m = (s * (an + b * zeta)).sum(axis=-1)
    return log_ndtr(-y * m / (sdc * np.sqrt((s * s).sum(axis=-1))))


def _log_density(zeta, *args):
    """log of phi(zeta) Phi(-t(zeta)) without the constant (2 pi)^(-T/2)."""
    return -0.5 * np.sum(zeta * zeta, axis=-1) + log_error_integrand(zeta, *args)


def integrand_mode(args, T: int) -> np.ndarray:
    """The maximum of phi(zeta) Phi(-t(zeta)), from starts at the origin and with
    each pair of tokens pushed apart (BFGS; the best of them)."""
    starts = [np.zeros(T)]
    for i in range(T):
        for j in range(T):
            if i != j:
                for a in (2.0, 5.0, 10.0):
                    z = np.zeros(T)
                    z[i], z[j] = -a, a
                    starts.append(z)
    best = None
    for z0 in starts:
        res = optimize.minimize(lambda z: -_log_density(z, *args), z0, method="BFGS")
        if best is None or res.fun < best.fun:
            best = res
    return best.x


def log_error_by_cubature(aq, an, kappa, b, sdc, y, half_width: float = 10.0, rtol: float = 1e-9):
    """log of :func:`error_by_cubature`'s value (for errors below the smallest double)."""
    return _cubature(aq, an, kappa, b, sdc, y, half_width, rtol)[0]


def error_by_cubature(aq, an, kappa, b, sdc, y, half_width: float = 10.0, rtol: float = 1e-9):
    """(value, relative error estimate) of :func:`_cubature`."""
    log_val, rel = _cubature(aq, an, kappa, b, sdc, y, half_width, rtol)
    return math.exp(log_val), rel


def _cubature(aq, an, kappa, b, sdc, y, half_width: float, rtol: float):
    """One class's error for T = 2 or 3 by adaptive cubature over the box
    spanned by the origin and the mode, widened by half_width, the integrand
    scaled by its value at the mode (so values far below 1e-300 keep their
    relative accuracy): (log value, relative error estimate). Beyond the box
    the Gaussian factor is below e^{-half_width^2 / 2} of its value at the
    nearest of origin and mode along every axis. scipy.integrate.cubature
    (SciPy >= 1.15, vectorized); nquad before it (the same answer, minutes for T = 3)."""
    aq, an = np.asarray(aq, float), np.asarray(an, float)
    T = aq.size
    args = (aq, an, kappa, b, sdc, y)
    mode = integrand_mode(args, T)
    ref = float(_log_density(mode, *args))
    # the box holds the mode and the origin: the integrand may peak at both (the
    # attention moving to another token, and the value noise alone)
    lo, hi = np.minimum(mode, 0.0) - half_width, np.maximum(mode, 0.0) + half_width
    if hasattr(integrate, "cubature"):
        res = integrate.cubature(lambda z: np.exp(_log_density(z, *args) - ref), lo, hi, rtol=rtol, atol=0.0,
                                 max_subdivisions=100_000)  # fmt: skip
        val, err = float(res.estimate), float(res.error)
    else:

        def f(*z):
            return math.exp(float(_log_density(np.array(z), *args)) - ref)

        opts = [{"epsabs": 0.0, "epsrel": rtol, "limit": 200, "points": [m]} for m in mode]
        val, err = integrate.nquad(f, list(zip(lo, hi)), opts=opts)
    return ref + math.log(val) - 0.5 * T * math.log(2 * math.pi), err / val


def design_points(args, T: int, anchor: int = 0) -> list[np.ndarray]:
    """Centres for :func:`error_by_importance_sampling`: for each token j, the
    maximum of phi Phi(-t) in the plane of (zeta_anchor, zeta_j) (the other
    coordinates 0), and the unconstrained maximum from there (BFGS)."""
    out = []
    for j in range(T):
        if j == anchor:
            continue

        def f2(u, j=j):
            z = np.zeros(T)
            z[anchor], z[j] = u
            return -float(_log_density(z, *args))

        best = min(
            (optimize.minimize(f2, [-a, a], method="BFGS") for a in (1.0, 3.0, 6.0)), key=lambda r: r.fun
        )
        z = np.zeros(T)
        z[anchor], z[j] = best.x
        out.append(z)
        out.append(optimize.minimize(lambda v: -float(_log_density(v, *args)), z, method="BFGS").x)
    return out


def error_by_importance_sampling(aq, an, kappa, b, sdc, y, n: int, rng, anchor: int = 0, chunk: int = 20_000):
    """One class's error by plain importance sampling, independent of the
    package's estimator: a mixture of N(0, I) (a quarter), N(0, 2.5^2 I) (a
    quarter) and N(c, I) at every centre c of :func:`design_points` (the rest,
    equally), n points drawn at random from it, ``chunk`` at a time: (value, standard error)."""
    aq, an = np.asarray(aq, float), np.asarray(an, float)
    T = aq.size
    args = (aq, an, kappa, b, sdc, y)
    centres = design_points(args, T, anchor)
    means = np.array([np.zeros(T), np.zeros(T), *centres])
    scales = np.array([1.0, 2.5] + [1.0] * len(centres))
    weights = np.array([0.25, 0.25] + [0.5 / len(centres)] * len(centres))
    s1 = s2 = 0.0
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        k = rng.choice(means.shape[0], size=m, p=weights)
        z = means[k] + scales[k, None] * rng.standard_normal((m, T))
        d2 = np.sum(z * z, axis=1)[:, None] - 2.0 * z @ means.T + np.sum(means * means, axis=1)
        log_comp = np.log(weights) - 0.5 * d2 / scales**2 - T * np.log(scales)
        log_q = np.logaddexp.reduce(log_comp, axis=1)
        w = np.exp(-0.5 * np.sum(z * z, axis=1) - log_q + log_error_integrand(z, *args))
        s1 += float(w.sum())
        s2 += float((w * w).sum())
    mean = s1 / n
    return mean, math.sqrt(max(s2 / n - mean * mean, 0.0) / (n - 1))


# -- the Bayes error of the data model (attnsim.data.bayes) -------------------------


def distinct_assignments(counts) -> np.ndarray:
    """Every distinct placement of the role multiset ``counts`` on its T tokens, (A, T)."""
    import itertools

    template = np.repeat(np.arange(4), counts)
    return np.array(sorted(set(itertools.permutations(template.tolist()))))


def bayes_log_likelihoods(v, means, assignments):
    """log of the mean over ``assignments`` (A, T) of N(v; means[assignment], I) for
    points v (N, T, 2), by enumeration (without the Gaussian's constant)."""
    m = means[assignments]  # (A, T, 2)
    out = np.empty(v.shape[0])
    for lo in range(0, v.shape[0], 2000):  # (2000, A, T, 2) at a time
        d2 = np.sum((v[lo : lo + 2000, None] - m[None]) ** 2, axis=(2, 3))  # (N, A)
        out[lo : lo + 2000] = np.logaddexp.reduce(-0.5 * d2, axis=1)
    return out - math.log(len(assignments))


def bayes_error_by_monte_carlo(m_pos, m_neg, counts, n: int, rng, shuffled: bool = True):
    """Plain Monte Carlo of the likelihood-ratio classifier's error, every
    assignment enumerated: fresh samples of both classes with uniformly random
    (or template) positions. (value, standard error)."""
    A = distinct_assignments(counts) if shuffled else np.repeat(np.arange(4), counts)[None]
    wrong = []
    for m_true, m_alt in ((m_pos, m_neg), (m_neg, m_pos)):
        pos = A[rng.integers(len(A), size=n)]
        v = m_true[pos] + rng.standard_normal((n, pos.shape[1], 2))
        lt, la = bayes_log_likelihoods(v, m_true, A), bayes_log_likelihoods(v, m_alt, A)
        wrong.append(np.where(la > lt, 1.0, np.where(la == lt, 0.5, 0.0)))
    w = 0.5 * (wrong[0] + wrong[1])
    return float(w.mean()), float(w.std(ddof=1) / math.sqrt(n))


def bayes_error_by_mean_shifts(m_pos, m_neg, counts, n: int, rng):
    """The shuffled-positions Bayes error by a mixture importance sampler unlike
    attnsim's: a quarter of the points from the true class itself, the rest from
    N(c, 1.2^2 I) at every assignment's midpoint c, equally weighted, every
    density by enumeration. (value, standard error)."""
    A = distinct_assignments(counts)
    template = np.repeat(np.arange(4), counts)
    terms = []
    for m_true, m_alt in ((m_pos, m_neg), (m_neg, m_pos)):
        a = m_true[template]
        centres = np.concatenate([a[None], 0.5 * (a[None] + m_alt[A])])  # (1 + A, T, 2)
        scales = np.array([1.0] + [1.2] * len(A))
        weights = np.array([0.25] + [0.75 / len(A)] * len(A))
        k = rng.choice(len(centres), size=n, p=weights)
        v = centres[k] + scales[k, None, None] * rng.standard_normal((n, len(template), 2))
        d2 = np.sum((v[:, None] - centres[None]) ** 2, axis=(2, 3))
        dim = 2 * len(template)
        log_q = np.logaddexp.reduce(np.log(weights) - 0.5 * d2 / scales**2 - dim * np.log(scales), axis=1)
        log_p = -0.5 * np.sum((v - a) ** 2, axis=(1, 2))
        lt, la = bayes_log_likelihoods(v, m_true, A), bayes_log_likelihoods(v, m_alt, A)
        wrong = np.where(la > lt, 1.0, np.where(la == lt, 0.5, 0.0))
        terms.append(wrong * np.exp(log_p - log_q))
    w = 0.5 * (terms[0] + terms[1])
    return float(w.mean()), float(w.std(ddof=1) / math.sqrt(n))


# The registry: every slow reference the fast code is checked against, by what it checks.
# The models' readable forward passes, losses and gradients are in the package (check-grad
# uses them) and are named here so tests and benchmarks find every reference in one place.
REFERENCES = {
    "attention model: forward, loss, gradients, a GD step": "attnsim.models.attention.reference",
    "encoder: every position, loss": "attnsim.models.encoder.reference",
    "population error of one class, by adaptive cubature": error_by_cubature,
    "population error of one class, log, by adaptive cubature": log_error_by_cubature,
    "population error of one class, by an independent importance sampler": error_by_importance_sampling,
    "Bayes error, every assignment enumerated, by plain Monte Carlo": bayes_error_by_monte_carlo,
    "Bayes error at shuffled positions, by an independent importance sampler": bayes_error_by_mean_shifts,
}
