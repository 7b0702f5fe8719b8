"""Metrics of a state (scores and outputs on a data set) and end-of-run regimes."""

from __future__ import annotations

import numpy as np

from .data import ROLE_NAMES

GROUPS = ("clean", "noisy")
REGIMES = ("not_overfitting", "partial", "benign", "harmful", "underfit")


def _mean(mask: np.ndarray, values: np.ndarray) -> float:
    return float(values[mask].mean()) if mask.any() else float("nan")


def accuracy_metrics(f: np.ndarray, y: np.ndarray, y_clean: np.ndarray) -> dict[str, float]:
    """Train accuracies overall, on clean and on noisy samples.

    ``train_acc_noisy`` compares noisy samples with their observed (flipped)
    labels, so it measures memorization; ``train_acc_noisy_true`` compares them
    with their true labels.
    """
    noisy = y != y_clean
    fitted = (y * f) > 0
    return {
        "train_acc": float(fitted.mean()),
        "train_acc_clean": _mean(~noisy, fitted),
        "train_acc_noisy": _mean(noisy, fitted),
        "train_acc_noisy_true": _mean(noisy, (y_clean * f) > 0),
    }


def role_scores(s: np.ndarray, roles: np.ndarray | None, noisy: np.ndarray) -> dict[str, float]:
    """Per group, the mean over samples of the total score on each role's tokens."""
    out = {}
    for group, mask in zip(GROUPS, (~noisy, noisy)):
        for code, name in enumerate(ROLE_NAMES):
            if roles is None or not mask.any():
                out[f"score_{group}_{name}"] = float("nan")
            else:
                mass = np.where(roles == code, s, 0.0).sum(axis=1)
                out[f"score_{group}_{name}"] = float(mass[mask].mean())
    return out


def frak_s(S_acc: np.ndarray, y_clean: np.ndarray, noisy: np.ndarray) -> dict[str, float]:
    """Cumulative sums of s_rel (1 - s_rel): per group, and per true class over
    clean samples (the paper's normalization of its first-version experiment)."""
    clean = ~noisy
    return {
        "frakS_clean": float(S_acc[clean].sum()),
        "frakS_noisy": float(S_acc[noisy].sum()),
        "frakS_pos": float(S_acc[clean & (y_clean > 0)].sum()),
        "frakS_neg": float(S_acc[clean & (y_clean < 0)].sum()),
    }


def regime(final: dict, benign_error: float) -> str:
    """Classify the end of a run (SPEC §3).

    not_overfitting: every clean sample fitted, no noisy one; partial: clean
    fitted and some but not all noisy; benign / harmful: every sample fitted
    and the population error (finite test error when there is no population
    metric) at most / above ``benign_error``; underfit: some clean sample is
    not fitted.
    """
    clean_ok = final["train_acc_clean"] == 1.0 or np.isnan(final["train_acc_clean"])
    noisy_acc = final["train_acc_noisy"]
    if not clean_ok:
        return "underfit"
    if np.isnan(noisy_acc) or noisy_acc == 1.0:
        err = final.get("pop_error")
        if err is None or np.isnan(err):
            acc = final.get("test_acc")
            if acc is None or np.isnan(acc):
                return "fitted"
            err = 1.0 - acc
        return "benign" if err <= benign_error else "harmful"
    return "not_overfitting" if noisy_acc == 0.0 else "partial"
