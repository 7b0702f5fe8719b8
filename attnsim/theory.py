"""Theory quantities: signal-to-noise ratio, memorization and generalization times."""

from __future__ import annotations

import math

import numpy as np


def snr(signal_norm: float, sigma: float, d: int) -> float:
    """SNR = |mu| / (sigma sqrt(d)), the benign-overfitting literature's convention."""
    return signal_norm / (sigma * math.sqrt(d))


def memorization_time(fit_step: np.ndarray) -> int | None:
    """First step after which every training sample stays fitted (None if some
    sample is not fitted at the end). ``fit_step`` comes from the in-loop record."""
    fit_step = np.asarray(fit_step)
    if fit_step.size == 0 or np.any(fit_step < 0):
        return None
    return int(fit_step.max())


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


def summary(cfg, traj) -> dict:
    """The "theory" section of result.json."""
    a = traj.arrays
    s = snr(cfg.signal_norm, cfg.sigma, cfg.d)
    out = {
        "snr": s,
        "n_snr2": cfg.n * s * s,
        "t_memorize": memorization_time(traj.fit_step),
        "t_generalize": None,
        "t_pop_loss_settled": None,
    }
    if "pop_score_relevant" in a:
        out["t_generalize"] = stays_above_time(a["step"], a["pop_score_relevant"], cfg.gen_score)
        out["t_pop_loss_settled"] = settle_time(a["step"], a["pop_loss"])
    return out
