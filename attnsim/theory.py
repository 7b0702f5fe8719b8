"""Theory: signal-to-noise ratio, the attention-gap law g, gaps, and the
memorization and generalization times (SPEC §6).

The g-law. One token with logit gap x over m equal competitors has score
s = e^x / (e^x + m), and 1 / (s (1 - s)) = e^x / m + 2 + m e^{-x}, whose
antiderivative is g(x; m) = 2x + 2 sinh(x - log m). If dx/dtau = c s (1 - s),
then g(x(tau)) = g(x(0)) + c tau: x grows roughly linearly while x < log m and
logarithmically after (x ~ log(m c tau)), with 1 - s ~ 1 / (c tau). In a
T-token model m = T - 1. For a sample whose competitors are not equal, the
effective gap x = z_sel - log(sum_{t != sel} e^{z_t}) + log m reproduces its
score exactly, s_sel = e^x / (e^x + m); the summaries below use it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._meta import FRESH_INTEGRATORS
from .data.dataset import RELEVANT


def snr(signal_norm: float, sigma: float, d: int) -> float:
    """SNR = |mu| / (sigma sqrt(d)), the benign-overfitting literature's convention."""
    return signal_norm / (sigma * math.sqrt(d))


def memorization_time(fit_step: np.ndarray) -> int | float | None:
    """First step after which every training sample stays fitted (None if some
    sample is not fitted at the end). ``fit_step`` comes from the in-loop record
    (integer GD steps; real steps for the gradient flow)."""
    fit_step = np.asarray(fit_step)
    if fit_step.size == 0 or np.any(fit_step < 0):
        return None
    t = fit_step.max()
    return int(t) if float(t).is_integer() else float(t)


def stays_above_time(steps: np.ndarray, values: np.ndarray, threshold: float) -> int | None:
    """First logged step from which ``values`` stay >= threshold (NaNs skipped)."""
    ok = ~np.isnan(values)
    steps, values = np.asarray(steps)[ok], np.asarray(values)[ok]
    if values.size == 0 or values[-1] < threshold:
        return None
    below = np.flatnonzero(values < threshold)
    return int(steps[0] if below.size == 0 else steps[below[-1] + 1])


def settle_time(steps: np.ndarray, values: np.ndarray, rel: float = 0.01) -> int | None:
    """First logged step from which ``values`` stay within ``rel`` of the final value."""
    ok = ~np.isnan(values)
    steps, values = np.asarray(steps)[ok], np.asarray(values)[ok]
    if values.size == 0:
        return None
    far = np.flatnonzero(np.abs(values - values[-1]) > rel * abs(values[-1]))
    return int(steps[0] if far.size == 0 else steps[far[-1] + 1])


def measured_times(cfg: Any, traj: Any) -> dict:
    """The events a run measured, for result.json's ``final`` section: ``t_memorize`` (every training
    sample fitted from then on), ``t_select`` (the relevant token's mean score on new samples at or
    above ``gen_score`` from then on: a selection event, not generalization, which is the risk's),
    ``t_pop_loss_settled`` (the population loss within 1% of its final value from then on), and
    ``times_refined`` (False: the last two at the population log grid's resolution)."""
    a = traj.arrays
    out = {
        "t_memorize": None if cfg.integrator in FRESH_INTEGRATORS else memorization_time(traj.fit_step),
        "t_select": None,
        "t_pop_loss_settled": None,
    }
    if "pop_score_relevant" in a:
        out["t_select"] = stays_above_time(a["step"], a["pop_score_relevant"], cfg.gen_score)
        out["t_pop_loss_settled"] = settle_time(a["step"], a["pop_loss"])
    out["times_refined"] = bool(traj.refined)  # False: these times have the population grid's resolution
    out.update(traj.refined)
    return out


def summary(cfg: Any, traj: Any, known_signal: bool = True) -> dict:
    """The "theory" section of result.json (``known_signal``: |mu| and sigma
    are known, so the SNR is defined): the SNR and the g-law fits (the measured event times are
    in ``final``: :func:`measured_times`)."""
    a = traj.arrays
    s = snr(cfg.signal_norm, cfg.sigma, cfg.d) if known_signal else None
    out = {"snr": s, "n_snr2": None if s is None else cfg.n * s * s}
    fits = law_fits(a["step"], a, cfg.T)
    out["g_law_m"] = cfg.T - 1
    for group, fit in fits.items():
        out[f"rate_{group}"] = None if fit is None else fit["rate"]
        out[f"g_law_{group}"] = fit
    return out


# -- the g-law ---------------------------------------------------------------


def g(x: ArrayLike, m: float) -> np.ndarray:
    """g(x; m) = 2x + 2 sinh(x - log m) (vectorized; inf beyond float range)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        return 2.0 * x + 2.0 * np.sinh(x - math.log(m))


def g_inv(y: ArrayLike, m: float, iters: int = 60) -> np.ndarray | float:
    """The inverse of :func:`g` in x, for any real y (vectorized, monotone).

    With u = x - log m the equation is h(u) = u + sinh(u) = (y - 2 log m) / 2,
    h increasing with h' = 1 + cosh(u) >= 2. Newton's method from
    u0 = asinh(Y) overshoots the root (|h(u0)| >= |Y|) and, h being convex for
    u > 0 and concave for u < 0, then decreases monotonically to it.
    """
    y = np.asarray(y, dtype=np.float64)
    c = math.log(m)
    Y = np.atleast_1d(0.5 * (y - 2.0 * c))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        u = np.arcsinh(Y)
        for _ in range(iters):
            e = np.exp(u)  # sinh and cosh from one exponential
            ie = 1.0 / e
            step = (u + 0.5 * (e - ie) - Y) / (1.0 + 0.5 * (e + ie))
            step[~np.isfinite(step)] = 0.0
            u -= step
            if np.all(np.abs(step) <= 1e-15 * np.maximum(1.0, np.abs(u))):
                break
    x = c + u
    return x.reshape(y.shape) if y.ndim else float(x[0])


def gap_law(x0: float, c: float, tau: ArrayLike, m: float) -> np.ndarray | float:
    """Predicted gap x(tau) = g^{-1}(g(x0) + c tau)."""
    return g_inv(g(x0, m) + c * np.asarray(tau, dtype=np.float64), m)


def fit_rate(steps: ArrayLike, x: ArrayLike, m: float, min_points: int = 3) -> dict | None:
    """Fit g(x(tau)) = a + c tau by least squares over the saturated phase
    (x >= log m); returns the rate c (per step), the intercept and the largest
    deviation |g^{-1}(a + c tau) - x| there, or None with too few points (or with m < 1
    competitors, a single token)."""
    if not m >= 1:  # no competitor (T = 1): no gap, no law to fit
        return None
    steps, x = np.asarray(steps, dtype=np.float64), np.asarray(x, dtype=np.float64)
    ok = np.isfinite(x) & (x >= math.log(m))
    if ok.sum() < min_points:
        return None
    tau, gx = steps[ok], g(x[ok], m)
    if not np.all(np.isfinite(gx)):
        return None
    A = np.stack([np.ones_like(tau), tau], axis=1)
    (a, c), *_ = np.linalg.lstsq(A, gx, rcond=None)  # start: linear in g-space
    # then least squares in x itself (g-space residuals overweight the largest gaps)
    a, c = _gauss_newton(tau, x[ok], m, a, c)
    pred = g_inv(a + c * tau, m)
    return {
        "rate": float(c),
        "intercept": float(a),
        "max_dev": float(np.max(np.abs(pred - x[ok]))),
        "from_step": int(tau[0]),
        "points": int(ok.sum()),
    }


def _gauss_newton(tau, x, m: float, a: float, c: float, iters: int = 100) -> tuple[float, float]:
    """Minimize sum (g^{-1}(a + c tau) - x)^2 over (a, c) by damped Gauss-Newton
    (Levenberg-Marquardt). d g^{-1}(y)/dy = 1 / g'(x) = 1 / (2 + 2 cosh(x - log m));
    stops when a step changes (a, c) by less than 1e-10 relative."""
    scale = max(1.0, float(tau[-1]))
    t = tau / scale  # rate per unit of scaled time: a well-conditioned 2 x 2 system
    v = np.array([a, c * scale])
    log_m = math.log(m)

    def model(v):
        xh = g_inv(v[0] + v[1] * t, m)
        return xh, xh - x

    xh, r = model(v)
    lam = 1e-3
    for _ in range(iters):
        with np.errstate(over="ignore"):
            dx = 1.0 / (2.0 + 2.0 * np.cosh(xh - log_m))
        J = np.stack([dx, dx * t], axis=1)
        H, grad = J.T @ J, J.T @ r
        step = np.linalg.solve(H + lam * np.diag(np.diag(H) + 1e-300), -grad)
        xh_new, r_new = model(v + step)
        if np.all(np.isfinite(r_new)) and r_new @ r_new <= r @ r:
            v, xh, r, lam = v + step, xh_new, r_new, lam / 3
            if np.all(np.abs(step) <= 1e-10 * (1.0 + np.abs(v))):
                break
        else:
            lam *= 10
            if lam > 1e12:
                break
    return float(v[0]), float(v[1] / scale)


# -- gaps ----------------------------------------------------------------------


def selected_tokens(
    roles: np.ndarray | None, final_s: np.ndarray, final_u: np.ndarray, y: np.ndarray, noisy: np.ndarray
) -> np.ndarray:
    """Per sample the token whose gaps are tracked (-1 if none): for a clean
    sample its relevant token (the highest-scoring one if several); for a
    noisy sample the highest-final-score token whose value agrees with the
    observed label (y_i u_it > 0), held fixed over the trajectory; without
    token values (the encoder) the highest-final-score token."""
    n, T = final_s.shape
    noisy = np.asarray(noisy, dtype=bool)[:, None]
    agree = y[:, None] * final_u > 0 if final_u is not None else np.ones((n, T), dtype=bool)
    relevant = roles == RELEVANT if roles is not None else np.zeros((n, T), dtype=bool)
    cand = np.where(noisy, agree, relevant)
    sel = np.argmax(np.where(cand, final_s, -np.inf), axis=1)  # the first of equal scores, per sample
    return np.where(cand.any(axis=1), sel, -1).astype(np.int64)


def gap_summaries(
    logits: np.ndarray,
    roles: np.ndarray | None,
    final_s: np.ndarray,
    final_u: np.ndarray,
    y: np.ndarray,
    noisy: np.ndarray,
    per_sample: bool = False,
) -> dict:
    """Gap summaries over the log grid (logits: (L, n, T)).

    Lambda (clean samples) and Gamma (noisy samples) are z_sel - z_t for the
    tracked token sel of :func:`selected_tokens` and every other token t. Per
    group: ``gap_<group>_min`` (sample mean of the smallest gap),
    ``gap_<group>_mean`` (sample mean of the mean gap) and ``gap_<group>_eff``
    (sample mean of the effective gap, see module docstring).
    """
    L, n, T = logits.shape
    m = T - 1
    sel = selected_tokens(roles, final_s, final_u, y, noisy)
    out = {}
    gaps = np.full((L, n, T), np.nan)
    eff = np.full((L, n), np.nan)
    idx = np.flatnonzero(sel >= 0)
    if idx.size and T >= 2:
        z = logits[:, idx, :]  # (L, tracked samples, T)
        tracked = np.zeros((idx.size, T), dtype=bool)
        tracked[np.arange(idx.size), sel[idx]] = True
        zs = z[:, tracked]  # (L, tracked samples): the tracked token's logit
        others = z[:, ~tracked].reshape(L, idx.size, m)  # the other tokens, in order
        gaps[:, idx, :] = zs[:, :, None] - z
        gaps[:, idx, sel[idx]] = np.nan
        top = others.max(axis=2)
        eff[:, idx] = zs - top - np.log(np.exp(others - top[:, :, None]).sum(axis=2)) + math.log(m)
    for group, mask in (("clean", ~noisy), ("noisy", noisy)):
        members = mask & (sel >= 0)
        if not members.any() or T < 2:
            for kind in ("min", "mean", "eff"):
                out[f"gap_{group}_{kind}"] = np.full(L, np.nan)
            continue
        with np.errstate(all="ignore"):
            out[f"gap_{group}_min"] = np.nanmin(gaps[:, members], axis=2).mean(axis=1)
            out[f"gap_{group}_mean"] = np.nanmean(gaps[:, members], axis=2).mean(axis=1)
        out[f"gap_{group}_eff"] = eff[:, members].mean(axis=1)
    if per_sample:
        out["gaps"] = gaps
        out["gap_eff"] = eff
        out["gap_token"] = sel
    return out


def law_fits(steps: np.ndarray, arrays: dict, T: int) -> dict:
    """Fitted g-law rates of the clean and noisy effective-gap summaries."""
    out = {}
    for group in ("clean", "noisy"):
        key = f"gap_{group}_eff"
        out[group] = fit_rate(steps, arrays[key], T - 1) if key in arrays else None
    return out
