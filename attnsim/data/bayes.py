"""The Bayes error of the data models: the error of the likelihood-ratio
classifier that knows the data model (SPEC §3), the floor every verdict on a
run's error is measured from.

A fresh clean sample has T tokens x_t = a_t(y) + eps_t, eps_t ~ N(0, sigma^2 I),
with a_t(y) = c_own mu_y + c_other mu_{-y} by the token's role (relevant: 1, 0;
weakly relevant, aligned: rho, 0; opposite: 0, rho; irrelevant: 0, 0) and the
labels +1 and -1 equally likely. Only the tokens' coordinates in span(mu+, mu-)
carry the label; in those two coordinates, divided by sigma, token t is
v_t ~ N(m_t(y), I_2).

Known positions (``shuffle_roles = false``): the likelihood ratio is linear in
v and the two classes are Gaussians of one covariance, so the Bayes error is
Phi(-Delta / 2) with Delta^2 = sum_t |m_t(+) - m_t(-)|^2 = |mu+ - mu-|^2
(n_relevant + rho^2 (n_weak_aligned + n_weak_opposite)) / sigma^2:
Phi(-|mu| sqrt((1 + 2 rho^2) / 2) / sigma) for the default roles and
orthogonal signals of equal norm.

Shuffled positions: each sample's roles are a uniformly random assignment pi
of the role multiset to the T positions, unknown to the classifier, so its
likelihood is the mean over assignments,
L_y(v) = log sum_pi exp(sum_t v_t . m_pi(t)(y) - |m_pi(t)(y)|^2 / 2),
a sum computed exactly by dynamic programming over the tokens with the number
of each role used so far as the state (:func:`log_assignments`). Which
position holds which role does not change the error (L_y is symmetric in the
tokens), so the error of class + is P(L_-(v) >= L_+(v)) at the template
positions pi_0. It is estimated by importance sampling from the Bhattacharyya
mixture of the alternatives: for every assignment pi' of class -, the Gaussian
halfway between m_pi0(+) and m_pi'(-), weighted by its Bhattacharyya
coefficient BC(pi') = exp(-|m_pi0(+) - m_pi'(-)|^2 / 8). That mixture is
q = sqrt(p_+) sum_pi' sqrt(p_pi') / S, S = sum_pi' BC(pi'), which puts each
alternative's component at its own design point (every half-space
{log p_pi' >= log p_+} has its most likely point at the midpoint), and on the
error event the likelihood ratio p_+ / q is at most S: the weights are
bounded, the estimator unbiased with a finite variance at most S P - P^2, and
S itself an upper bound on the class's error. The assignments are drawn
through the same dynamic program, so no assignment is ever enumerated. With a
standard error above ``RESOLVED_REL`` of the estimate, or below ``FLOOR``, the
error is reported unresolved, as an upper bound (S, or ``FLOOR`` when S is
below it); the known-positions error is always a lower bound.

data_model = magen2025: the signal token y mu carries no noise and the noise
token none along mu, so sign(sum_t x_t . mu) = y always: the Bayes error is 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.special import ndtr

BAYES_SAMPLES = 1 << 14  # importance points per class of the shuffled-positions estimator (2-6 % relative se)
BAYES_SEED = (
    20250917  # the estimator's own stream: a data model's Bayes error does not depend on a run's seed
)
RESOLVED_REL = 0.2  # a standard error above this share of the estimate: unresolved (an upper bound)
FLOOR = 1e-300  # shuffled-position errors below this are reported as this upper bound (float64 runs out)

CLOSED = "closed form Phi(-Delta/2) of the likelihood-ratio test at known token positions"
SHUFFLED = (
    "importance sampling of the likelihood-ratio test over uniformly random token positions "
    "(the Bhattacharyya mixture of the alternative assignments, 2 x {n} points)"
)
MAGEN = "closed form: under data_model magen2025 sign(sum_t x_t . mu) is the label, so the Bayes error is 0"


def role_means(mu_pos: np.ndarray, mu_neg: np.ndarray, sigma: float, rho: float) -> tuple[np.ndarray, ...]:
    """(4, 2) mean of each role's token (relevant, weak aligned, weak opposite,
    irrelevant) for class + and for class -, in an orthonormal basis of
    span(mu+, mu-) and in units of sigma."""
    a, b = np.asarray(mu_pos, dtype=np.float64), np.asarray(mu_neg, dtype=np.float64)
    na = float(np.linalg.norm(a))
    ab = float(a @ b)
    pos = np.array([na, 0.0])
    neg = np.array([ab / na, math.sqrt(max(float(b @ b) - (ab / na) ** 2, 0.0))])
    own = np.array([1.0, rho, 0.0, 0.0])
    other = np.array([0.0, 0.0, rho, 0.0])
    m_pos = (own[:, None] * pos + other[:, None] * neg) / sigma
    m_neg = (own[:, None] * neg + other[:, None] * pos) / sigma
    return m_pos, m_neg


def known_positions(
    mu_pos: np.ndarray, mu_neg: np.ndarray, sigma: float, rho: float, role_counts: Sequence[int]
) -> float:
    """Phi(-Delta / 2): the Bayes error when every token's role is known."""
    return float(ndtr(-0.5 * _delta(mu_pos, mu_neg, sigma, rho, role_counts)))


def _delta(mu_pos, mu_neg, sigma, rho, role_counts) -> float:
    diff = np.asarray(mu_pos, dtype=np.float64) - np.asarray(mu_neg, dtype=np.float64)
    r0, r1, r2, _ = role_counts
    return float(np.linalg.norm(diff)) * math.sqrt(r0 + rho * rho * (r1 + r2)) / sigma


def log_assignments(logw: np.ndarray, counts: Sequence[int]) -> np.ndarray:
    """log of sum over assignments pi (role multiset ``counts`` = (r0, r1, r2, r3)
    placed on the T tokens) of exp(sum_t logw[..., t, pi(t)]), for logw
    (..., T, 4): dynamic programming over the tokens, the state the number of
    relevant, aligned and opposite roles placed (the irrelevant ones follow)."""
    r0, r1, r2, r3 = (int(c) for c in counts)
    lead, T = logw.shape[:-2], logw.shape[-2]
    S = np.full((*lead, r0 + 1, r1 + 1, r2 + 1), -np.inf)
    S[..., 0, 0, 0] = 0.0
    used = np.add.outer(np.add.outer(np.arange(r0 + 1), np.arange(r1 + 1)), np.arange(r2 + 1))
    with np.errstate(invalid="ignore"):  # -inf + -inf in unreachable states
        for t in range(T):
            w = logw[..., t, :]
            irr = (t - used >= 0) & (t - used < r3)  # one more irrelevant token still allowed
            new = np.where(irr, S + w[..., 3, None, None, None], -np.inf)
            new[..., 1:, :, :] = np.logaddexp(
                new[..., 1:, :, :], S[..., :-1, :, :] + w[..., 0, None, None, None]
            )
            new[..., :, 1:, :] = np.logaddexp(
                new[..., :, 1:, :], S[..., :, :-1, :] + w[..., 1, None, None, None]
            )
            new[..., :, :, 1:] = np.logaddexp(
                new[..., :, :, 1:], S[..., :, :, :-1] + w[..., 2, None, None, None]
            )
            S = new
    return S[..., r0, r1, r2]


def sample_assignments(
    logw: np.ndarray, counts: Sequence[int], size: int, rng: np.random.Generator
) -> np.ndarray:
    """(size, T) role codes of assignments drawn with probability proportional
    to exp(sum_t logw[t, pi(t)]) (logw (T, 4), the same for every draw): the
    forward tables of :func:`log_assignments`, then token by token backwards."""
    r0, r1, r2, r3 = (int(c) for c in counts)
    T = logw.shape[0]
    used = np.add.outer(np.add.outer(np.arange(r0 + 1), np.arange(r1 + 1)), np.arange(r2 + 1))
    tables = [np.full((r0 + 1, r1 + 1, r2 + 1), -np.inf)]
    tables[0][0, 0, 0] = 0.0
    for t in range(T):  # tables[t]: log sums over the first t tokens, by state
        S = tables[-1]
        new = np.where((t - used >= 0) & (t - used < r3), S + logw[t, 3], -np.inf)
        new[1:] = np.logaddexp(new[1:], S[:-1] + logw[t, 0])
        new[:, 1:] = np.logaddexp(new[:, 1:], S[:, :-1] + logw[t, 1])
        new[:, :, 1:] = np.logaddexp(new[:, :, 1:], S[:, :, :-1] + logw[t, 2])
        tables.append(new)
    # padded by one -inf row in front of each count, so "one fewer" never wraps around
    padded = [np.pad(S, ((1, 0), (1, 0), (1, 0)), constant_values=-np.inf) for S in tables]
    a, b, c = np.full(size, r0 + 1), np.full(size, r1 + 1), np.full(size, r2 + 1)  # padded indices
    roles = np.empty((size, T), dtype=np.int64)
    for t in range(T - 1, -1, -1):
        P = padded[t]
        logits = np.stack(
            [
                P[a - 1, b, c] + logw[t, 0],
                P[a, b - 1, c] + logw[t, 1],
                P[a, b, c - 1] + logw[t, 2],
                P[a, b, c] + logw[t, 3],  # -inf where the first t tokens cannot hold the other roles
            ]
        )
        k = np.argmax(logits + rng.gumbel(size=logits.shape), axis=0)  # the Gumbel-max draw
        roles[:, t] = k
        a, b, c = a - (k == 0), b - (k == 1), c - (k == 2)
    return roles


def _class_error(
    m_true: np.ndarray,
    m_alt: np.ndarray,
    template: np.ndarray,
    counts: Sequence[int],
    n: int,
    rng: np.random.Generator,
) -> tuple[float, float, float]:
    """(estimate, standard error, rigorous upper bound S) of the error of the
    class whose role means are ``m_true`` (4, 2), against the class of means
    ``m_alt``, the sample's roles ``template`` (T,), shuffled positions."""
    T = template.size
    a = m_true[template]  # (T, 2): the true class at the template positions
    # per token and role: log Bhattacharyya coefficient of the alternative's role there
    log_bc = -np.sum((a[:, None, :] - m_alt[None, :, :]) ** 2, axis=-1) / 8.0  # (T, 4)
    log_S = float(log_assignments(log_bc, counts))
    roles = sample_assignments(log_bc, counts, n, rng)
    v = 0.5 * (a[None] + m_alt[roles]) + rng.standard_normal((n, T, 2))
    half_true = 0.5 * np.einsum("ntk,tk->n", v, a) - 0.25 * float(np.sum(a * a))
    sq_alt, sq_true = np.sum(m_alt * m_alt, axis=1), np.sum(m_true * m_true, axis=1)
    vm_alt, vm_true = v @ m_alt.T, v @ m_true.T  # (n, T, 4)
    log_q = log_assignments(0.5 * vm_alt - 0.25 * sq_alt, counts)
    L_alt = log_assignments(vm_alt - 0.5 * sq_alt, counts)
    L_true = log_assignments(vm_true - 0.5 * sq_true, counts)
    wrong = np.where(L_alt > L_true, 1.0, np.where(L_alt == L_true, 0.5, 0.0))
    log_w = log_S + half_true - log_q  # <= log S wherever wrong > 0 (module docstring)
    top = float(np.max(np.where(wrong > 0, log_w, -np.inf)))
    if not np.isfinite(top):
        return 0.0, 0.0, math.exp(log_S)
    w = wrong * np.exp(log_w - top)
    mean, sd = float(w.mean()), float(w.std(ddof=1))
    scale = math.exp(top)
    return mean * scale, sd / math.sqrt(n) * scale, math.exp(min(log_S, 0.0))


def shuffled_positions(
    mu_pos: np.ndarray,
    mu_neg: np.ndarray,
    sigma: float,
    rho: float,
    role_counts: Sequence[int],
    samples: int = BAYES_SAMPLES,
    seed: int = BAYES_SEED,
) -> dict:
    """The Bayes error at uniformly random token positions (module docstring):
    ``bayes_error`` with ``_se``, ``_resolved`` (0: only an upper bound, se
    null) and ``bayes_error_lower`` (the known-positions error, a lower bound:
    knowing the positions cannot hurt)."""
    counts = tuple(int(c) for c in role_counts)
    lower = known_positions(mu_pos, mu_neg, sigma, rho, counts)
    out = {"bayes_error_lower": lower}
    if sum(c > 0 for c in counts) <= 1 or lower > 0.0 and math.isclose(lower, 0.5):
        # one role only (nothing to shuffle), or no signal at all
        return {**out, "bayes_error": lower, "bayes_error_se": 0.0, "bayes_error_resolved": 1.0}
    if _log_bound(mu_pos, mu_neg, sigma, rho, counts) < math.log(FLOOR):  # beyond float64's resolution
        return {**out, "bayes_error": FLOOR, "bayes_error_se": math.nan, "bayes_error_resolved": 0.0}
    m_pos, m_neg = role_means(mu_pos, mu_neg, sigma, rho)
    template = np.repeat(np.arange(4), counts)
    rng = np.random.default_rng(seed)
    p, se, bound = 0.0, 0.0, 0.0
    for m_true, m_alt in ((m_pos, m_neg), (m_neg, m_pos)):
        est, se_c, S = _class_error(m_true, m_alt, template, counts, samples, rng)
        p, se, bound = p + 0.5 * est, math.hypot(se, 0.5 * se_c), bound + 0.5 * S  # hypot: no underflow
    if p >= FLOOR and se <= RESOLVED_REL * p:
        return {**out, "bayes_error": max(p, lower), "bayes_error_se": se, "bayes_error_resolved": 1.0}
    bound = max(min(bound, 0.5), FLOOR)
    return {**out, "bayes_error": bound, "bayes_error_se": math.nan, "bayes_error_resolved": 0.0}


def _log_bound(mu_pos, mu_neg, sigma, rho, counts) -> float:
    """log of the upper bound S (module docstring), the larger of the two classes'."""
    m_pos, m_neg = role_means(mu_pos, mu_neg, sigma, rho)
    template = np.repeat(np.arange(4), counts)
    out = -math.inf
    for m_true, m_alt in ((m_pos, m_neg), (m_neg, m_pos)):
        a = m_true[template]
        log_bc = -np.sum((a[:, None, :] - m_alt[None, :, :]) ** 2, axis=-1) / 8.0
        out = max(out, float(log_assignments(log_bc, counts)))
    return out


def bayes_error(
    data_model: str,
    mu_pos: np.ndarray | None,
    mu_neg: np.ndarray | None,
    sigma: float | None,
    rho: float | None,
    role_counts: Sequence[int] | None,
    shuffled: bool,
    samples: int = BAYES_SAMPLES,
) -> dict:
    """The Bayes error of a data model with its method (``bayes_method``), or
    the reason there is none (``bayes_reason``; the error keys then NaN)."""
    if data_model == "magen2025":
        return {"bayes_error": 0.0, "bayes_error_se": 0.0, "bayes_error_resolved": 1.0, "bayes_method": MAGEN}
    if mu_pos is None or mu_neg is None or sigma is None or role_counts is None:
        return {
            **_none(),
            "bayes_reason": "no data model: the data file gives no mu_pos, mu_neg, sigma and "
            "roles, so no Bayes error exists; the verdict measures the error itself (the excess over 0)",
        }
    if rho is None:
        rho = 0.0 if not (role_counts[1] or role_counts[2]) else None
        if rho is None:
            return {**_none(), "bayes_reason": "no Bayes error without rho (the samples have weak tokens)"}
    if not shuffled:
        err = known_positions(mu_pos, mu_neg, sigma, rho, role_counts)
        return {
            "bayes_error": err,
            "bayes_error_se": 0.0,
            "bayes_error_resolved": 1.0,
            "bayes_method": CLOSED,
        }
    out = shuffled_positions(mu_pos, mu_neg, sigma, rho, role_counts, samples)
    return {**out, "bayes_method": SHUFFLED.format(n=samples)}


def of_dataset(ds, data_model: str, shuffled: bool, cache: dict | None = None) -> dict:
    """:func:`bayes_error` of a Dataset (in any orthonormal coordinates: only the
    signals' Gram matrix enters), its positions shuffled when ``shuffled`` or
    when its samples' roles differ; ``cache``: results by their arguments."""
    roles = ds.roles
    shuffled = bool(shuffled or (roles is not None and roles.shape[0] > 1 and np.any(roles != roles[:1])))
    if ds.mu_pos is None or ds.mu_neg is None:
        key = None
    else:
        gram = (float(ds.mu_pos @ ds.mu_pos), float(ds.mu_pos @ ds.mu_neg), float(ds.mu_neg @ ds.mu_neg))
        key = (data_model, gram, ds.sigma, ds.rho, ds.role_counts, shuffled)
    if cache is not None and key is not None and key in cache:
        return cache[key]
    out = bayes_error(data_model, ds.mu_pos, ds.mu_neg, ds.sigma, ds.rho, ds.role_counts, shuffled)
    if cache is not None and key is not None:
        if len(cache) > 64:
            cache.clear()
        cache[key] = out
    return out


def _none() -> dict:
    return {"bayes_error": math.nan, "bayes_error_se": math.nan, "bayes_error_resolved": math.nan}


__all__ = [
    "bayes_error",
    "known_positions",
    "log_assignments",
    "of_dataset",
    "sample_assignments",
    "shuffled_positions",
]
