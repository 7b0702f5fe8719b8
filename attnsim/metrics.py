"""Metrics of a state (scores and outputs on a data set) and end-of-run regimes."""

from __future__ import annotations

import numpy as np

from .data import ROLE_NAMES

GROUPS = ("clean", "noisy")
REGIMES = ("not_overfitting", "partial", "benign", "harmful", "underfit", "fitted")


class StateMetrics:
    """Metrics of one state on the training set, with the group weights
    precomputed so each evaluation is a few small matrix products.

    Parameters
    ----------
    y, y_clean : (n,) observed and true labels.  roles : (n, T) role codes or None.
    """

    def __init__(self, y: np.ndarray, y_clean: np.ndarray, roles: np.ndarray | None):
        self.y, self.y_clean = y, y_clean
        self.noisy = noisy = y != y_clean
        groups = (~noisy, noisy)
        self.group_avg = np.stack([_avg_row(g) for g in groups])  # (2, n)
        self.onehot = None if roles is None else (roles[:, :, None] == np.arange(4)).astype(float)
        clean = ~noisy
        self.frak_w = np.stack([clean, noisy, clean & (y_clean > 0), clean & (y_clean < 0)]).astype(
            float
        )  # (4, n)
        self.role_keys = [f"score_{g}_{r}" for g in GROUPS for r in ROLE_NAMES]

    def accuracy(self, f: np.ndarray) -> dict[str, float]:
        """Train accuracies overall, on clean and on noisy samples.

        ``train_acc_noisy`` compares noisy samples with their observed (flipped)
        labels, so it measures memorization; ``train_acc_noisy_true`` compares
        them with their true labels.
        """
        fitted = (self.y * f > 0).astype(float)
        by_group = self.group_avg @ fitted
        return {
            "train_acc": float(fitted.mean()),
            "train_acc_clean": float(by_group[0]),
            "train_acc_noisy": float(by_group[1]),
            "train_acc_noisy_true": float(self.group_avg[1] @ (self.y_clean * f > 0)),
            "n_fitted": int(fitted.sum()),
        }

    def role_scores(self, s: np.ndarray) -> dict[str, float]:
        """Per group (clean, noisy), the mean over its samples of the total
        score on each role's tokens (NaN without roles or for an empty group)."""
        if self.onehot is None:
            return dict.fromkeys(self.role_keys, float("nan"))
        mass = np.einsum("nt,ntr->nr", s, self.onehot)
        return dict(zip(self.role_keys, (self.group_avg @ mass).ravel().tolist()))

    def frak_s(self, S_acc: np.ndarray) -> dict[str, float]:
        """Cumulative sums of s_rel (1 - s_rel): per group, and per true class
        over clean samples (the normalization of the paper's first version)."""
        v = self.frak_w @ S_acc
        return dict(zip(("frakS_clean", "frakS_noisy", "frakS_pos", "frakS_neg"), v.tolist()))


def _avg_row(mask: np.ndarray) -> np.ndarray:
    """Weights that average over ``mask`` (all NaN for an empty group)."""
    if not mask.any():
        return np.full(mask.size, np.nan)
    return mask / mask.sum()


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
