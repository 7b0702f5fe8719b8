"""Metrics of a state (scores and outputs on a data set) and end-of-run regimes."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from . import registry
from .data.dataset import ROLE_NAMES

GROUPS = ("clean", "noisy")
REGIMES = (
    "not_overfitting",
    "partial",
    "benign",
    "harmful",
    "underfit",
    "fitted",
    "clean_labels",
    "fresh_samples",
)
SCORE_KEYS = tuple(f"score_{g}_{r}" for g in GROUPS for r in ROLE_NAMES)
POP_KEYS = (
    "pop_error",
    "pop_error_se",
    "pop_error_resolved",
    "pop_loss",
    *(f"pop_score_{r}" for r in ROLE_NAMES),
)
TEST_KEYS = ("test_loss", "test_acc")
COUNT_KEYS = ("n_fitted", "n_fitted_clean", "n_fitted_noisy")
GAP_KEYS = tuple(f"gap_{g}_{kind}" for g in GROUPS for kind in ("min", "mean", "eff"))
# Every scalar metric logged at each log point, in result.json order. ``final``
# holds their values at the last log point, and those of the metrics a model declares.
LOG_METRICS = (
    "train_loss",
    "train_acc",
    "train_acc_clean",
    "train_acc_noisy",
    "train_acc_noisy_true",
    *COUNT_KEYS,
    *TEST_KEYS,
    *SCORE_KEYS,
    "score_cls",
    "score_max",
    "frakS_clean",
    "frakS_noisy",
    "frakS_pos",
    "frakS_neg",
    "p_norm",
    "W_dev",
    *POP_KEYS,
    *GAP_KEYS,
)
# every array trajectory.npz can hold: the log grid, the metrics, per-sample
# records, and (with --save-scores) the full per-sample histories
TRAJECTORY_KEYS = (
    "step",
    *LOG_METRICS,
    "selected",
    "selected_role",
    "example_scores",
    "example_index",
    "fit_step",
    "y",
    "y_clean",
    "roles",
    "scores",
    "logits",
    "gaps",
    "gap_eff",
    "gap_token",
    "mm_cos",
)


class StateMetrics:
    """Metrics of states on the training set, with the group weights
    precomputed so each evaluation is a few small matrix products. Each method
    takes one state (f (n,), s (n, T), S_acc (n,)) and returns floats, or a
    stack of L states ((L, n), (L, n, T), (L, n)) and returns arrays of L values.

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
        fitted = self.y * f > 0
        by_group = fitted @ self.group_avg.T
        return _scalars(
            {
                "train_acc": fitted.mean(axis=-1),
                "train_acc_clean": by_group[..., 0],
                "train_acc_noisy": by_group[..., 1],
                "train_acc_noisy_true": (self.y_clean * f > 0) @ self.group_avg[1],
                "n_fitted": np.count_nonzero(fitted, axis=-1),
                "n_fitted_clean": np.count_nonzero(fitted & ~self.noisy, axis=-1),
                "n_fitted_noisy": np.count_nonzero(fitted & self.noisy, axis=-1),
            }
        )

    def max_score(self, s: np.ndarray) -> dict[str, float]:
        """``score_max``: the mean over training samples of the largest token
        score, how concentrated attention is (the paper's attention-concentration
        figure logs this for the [CLS] query of its fine-tuned layer)."""
        return _scalars({"score_max": s.max(axis=-1).mean(axis=-1)})

    def role_scores(self, s: np.ndarray) -> dict[str, float]:
        """Per group (clean, noisy), the mean over its samples of the total
        score on each role's tokens (NaN without roles or for an empty group)."""
        if self.onehot is None:
            return _scalars(dict.fromkeys(self.role_keys, np.full(s.shape[:-2], np.nan)))
        mass = np.einsum("...nt,ntr->...nr", s, self.onehot)
        by_group = np.einsum("gn,...nr->...gr", self.group_avg, mass)  # (..., 2, 4)
        return _scalars(dict(zip(self.role_keys, np.moveaxis(by_group.reshape(*s.shape[:-2], 8), -1, 0))))

    def frak_s(self, S_acc: np.ndarray) -> dict[str, float]:
        """Cumulative sums of s_rel (1 - s_rel): per group, and per true class
        over clean samples (the normalization of the paper's first version).
        A state's sums come out the same whatever the size of the stack it is
        in (einsum's loop over samples; BLAS may order a product's sums by
        its shape)."""
        v = np.einsum("...n,kn->...k", S_acc, self.frak_w)
        return _scalars(
            dict(zip(("frakS_clean", "frakS_noisy", "frakS_pos", "frakS_neg"), np.moveaxis(v, -1, 0)))
        )


def _scalars(values: dict) -> dict:
    """0-d values as Python numbers (one state); arrays unchanged (a stack)."""
    return {k: (v.item() if np.ndim(v) == 0 else v) for k, v in values.items()}


def _avg_row(mask: np.ndarray) -> np.ndarray:
    """Weights that average over ``mask`` (all NaN for an empty group)."""
    if not mask.any():
        return np.full(mask.size, np.nan)
    return mask / mask.sum()


def regime(
    n_clean: int,
    fitted_clean: int,
    n_noisy: int,
    fitted_noisy: int,
    excess: float | None,
    benign_error: float,
) -> str:
    """Classify the end of a run (SPEC §3) from integer counts of fitted samples.

    underfit: some clean sample is not fitted; clean_labels: every sample
    fitted and none of them noisy (no label-overfitting verdict applies);
    not_overfitting: every clean sample fitted, no noisy one; partial: some
    but not all noisy samples; benign / harmful: every sample fitted, the
    flipped ones included, and ``excess`` (the error in excess of the Bayes
    error of the data model) at most / above ``benign_error``; fitted: every
    sample fitted but no error measure. Counts, not accuracies: a mean of 1/n
    weights is not exactly 1.0 for most n.
    """
    if fitted_clean < n_clean:
        return "underfit"
    if n_noisy == 0:
        return "clean_labels"
    if fitted_noisy < n_noisy:
        return "not_overfitting" if fitted_noisy == 0 else "partial"
    if excess is None or not np.isfinite(excess):
        return "fitted"
    return "benign" if excess <= benign_error else "harmful"


class Measure(NamedTuple):
    """An error measure as reported: the value, its standard error, and whether
    it is resolved (False: ``value`` is only an upper bound, se NaN)."""

    value: float
    se: float
    resolved: bool

    def minus(self, other: Measure) -> Measure:
        """self - other. With either one only bounded, the difference is bounded
        by this value (the other is >= 0), and flagged."""
        if self.resolved and other.resolved:
            return Measure(self.value - other.value, math.hypot(self.se, other.se), True)
        return Measure(self.value, math.nan, False)

    def interval(self) -> tuple[float, float]:
        """The +-2 se interval (an upper bound: from 0 to it)."""
        if not self.resolved:
            return -math.inf, self.value
        se = self.se if np.isfinite(self.se) else 0.0
        return self.value - 2.0 * se, self.value + 2.0 * se

    def fields(self, name: str) -> dict:
        return {name: self.value, f"{name}_se": self.se, f"{name}_resolved": 1.0 if self.resolved else 0.0}


NO_MEASURE = Measure(math.nan, math.nan, True)


def _measure(value, se, resolved) -> Measure:
    """A reported error as a Measure: only an explicit 0 marks an unresolved one
    (NaN or None: resolved, or no value at all)."""
    value = math.nan if value is None else float(value)
    se = math.nan if se is None else float(se)
    return Measure(value, se, resolved != 0.0)


def final_metrics(
    arrays: dict[str, np.ndarray],
    n_noisy: int,
    benign_error: float,
    twin: dict | None = None,
    bayes: dict | None = None,
    uniform: dict | None = None,
    test_n: int = 0,
    fresh: bool = False,
) -> dict:
    """The "final" section of a result: every :data:`LOG_METRICS` key at the
    last log point (NaN for test and population metrics that were not
    computed) and every metric the model declares (:attr:`attnsim.registry.Entry.metrics`), the
    population error at initialization and with uniform attention (``uniform``: the population
    metrics at q = 0 with the initial head), the group sizes, the Bayes error of the data model (``bayes``,
    :func:`attnsim.data.bayes.bayes_error`), the error in excess of it, the
    clean-label twin's error and the cost of label noise (error minus the
    twin's), whether the run generalizes, and the regime.

    The error measure is the population error, else the finite test error
    (of ``test_n`` samples, with its binomial standard error). The regime's
    excess is error - bayes_error (without a data model, the error itself:
    ``regime_rule`` says which); ``regime_borderline`` is set when the +-2 se
    interval of the excess contains ``benign_error`` (the verdict is kept). ``fresh``: the run
    trained on fresh samples (integrator population or online): regime ``fresh_samples``.
    Differences assume their two terms independent (the twin shares the
    estimator's points, so its se is at most that); where a term is only an
    upper bound the difference is bounded by the run's error, and flagged.
    """
    nan = float("nan")
    final = {k: (arrays[k][-1].item() if k in arrays else nan) for k in LOG_METRICS}
    final = {k: v for k, v in final.items() if k in arrays or k in TEST_KEYS + POP_KEYS}
    # the metrics a model declares (its registry entry) and records, by the same rule
    final.update(
        {k: arrays[k][-1].item() for k in registry.model_metrics() if k in arrays and k not in final}
    )
    final["pop_error_init"] = float(arrays["pop_error"][0]) if "pop_error" in arrays else nan
    final["pop_error_uniform"] = float((uniform or {}).get("pop_error", nan))
    n = int(arrays["y"].size)
    final["n_noisy"] = n_noisy
    final["n_clean"] = n - n_noisy
    population = np.isfinite(final["pop_error"])
    if population:
        error = _measure(final["pop_error"], final["pop_error_se"], final.get("pop_error_resolved"))
    elif np.isfinite(final["test_acc"]) and test_n > 0:
        p = 1.0 - final["test_acc"]
        error = Measure(p, math.sqrt(max(p * (1.0 - p), 1.0 / test_n) / test_n), True)
    else:
        error = NO_MEASURE
    bayes = bayes or {}
    known = np.isfinite(bayes.get("bayes_error", nan))
    floor = _measure(
        bayes.get("bayes_error"), bayes.get("bayes_error_se"), bayes.get("bayes_error_resolved", 1.0)
    )
    final.update(floor.fields("bayes_error"))
    excess = error.minus(floor if known else Measure(0.0, 0.0, True))
    final.update(excess.fields("excess_error"))
    if not np.isfinite(error.value):
        final["excess_error_resolved"] = nan
    twin = twin or {}
    if population:
        clean = _measure(twin.get("pop_error"), twin.get("pop_error_se"), twin.get("pop_error_resolved", 1.0))
    else:
        t_err = twin.get("test_error", nan)
        clean = Measure(
            t_err, math.sqrt(max(t_err * (1 - t_err), 1 / test_n) / test_n) if test_n else nan, True
        )
    has_twin = bool(np.isfinite(clean.value))
    final.update(clean.fields("error_clean_twin"))
    cost = error.minus(clean) if has_twin else NO_MEASURE
    final.update(cost.fields("label_noise_cost"))
    if not has_twin:
        final["error_clean_twin_resolved"] = final["label_noise_cost_resolved"] = nan
    if twin.get("reason"):
        final["clean_twin"] = twin["reason"]
    measured = bool(np.isfinite(excess.value))
    final["generalized"] = bool(excess.value <= benign_error) if measured else None
    final["regime_rule"] = (
        "excess over the Bayes error" if known else "the error itself (no Bayes error: no data model)"
    )
    final["regime"] = regime(
        n - n_noisy,
        final["n_fitted_clean"],
        n_noisy,
        final["n_fitted_noisy"],
        excess.value if measured else None,
        benign_error,
    )
    if fresh:  # no training set, nothing memorized: no label-overfitting verdict (SPEC §17)
        final["regime"] = "fresh_samples"
    lo, hi = excess.interval()
    final["regime_borderline"] = (
        bool(measured and lo <= benign_error < hi) if final["regime"] in ("benign", "harmful") else False
    )
    return final


def format_error(value: float, se: float, resolved: float | None = None) -> str:
    """A population error as printed: "v +- se", or "< bound (unresolved: an
    upper bound)" when the estimator could not resolve it (``resolved`` = 0:
    the value is then an upper bound). NaN or None prints as n/a."""
    if value is None or value != value:
        return "n/a"
    if resolved is not None and resolved == 0.0:
        return f"< {value:.2g} (unresolved: an upper bound)"
    return f"{value:.3g} +- {'n/a' if se is None or se != se else format(se, '.2g')}"


def known_metrics() -> tuple[str, ...]:
    """Every array name a trajectory can hold: :data:`TRAJECTORY_KEYS` and the models' declared metrics."""
    return (*TRAJECTORY_KEYS, *registry.model_metrics())


def uniform_attention(pop: Any, ds: Any) -> dict | None:
    """The population metrics of uniform attention (q = 0) with the run's
    initial head: what attention adds is measured from this (None without
    population metrics)."""
    if pop is None or ds.mu_pos is None:
        return None
    nu = ds.nu
    return pop.evaluate(0.0, 0.0, 0.0, 0.0, float(nu @ ds.mu_pos), float(nu @ ds.mu_neg), float(nu @ nu))
