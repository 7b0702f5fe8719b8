"""What a model with metrics of its own (``classifier = False``: a regression, a model with no
labels, scores or regimes) gets from the library instead of the paper's recorder and metrics:
its data stand-in, the recorder of its metrics along the log grid, and the formatting its
default summaries use (:class:`attnsim.models.base.ModelSpec` gives the default ``findings``,
``summary`` and ``seeds_summary`` on top of them).

A model writes only its stepper (:class:`attnsim.models.base.Stepper`: ``_advance``, ``state``,
``extra_metrics``) and, if it has one, its evaluator; every metric it declares in its registry
entry reaches result.json's ``final`` as its last finite value on the log grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class OwnData:
    """What the run's data says of itself for a model that draws its own (its tokens are the
    problem's): where it came from, its warnings, and the arrays its population metrics read."""

    source: str
    arrays: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    y: None = None  # no labels: a classifier's fields, empty
    n_noisy: int = 0

    def relevant_indicator(self, T: int) -> None:
        return None  # no relevant tokens


@dataclass
class MetricsRecorder:
    """A model's own metrics at every log point: the stepper's ``extra_metrics`` and what the
    evaluator measured there (the driver's recorder protocol, :class:`attnsim.driver.Recorder`)."""

    grid: np.ndarray
    rows: list = field(default_factory=list)
    quiet: bool = False

    def record(self, j: int, step: int, stepper: Any, evaluated: dict) -> None:
        self.rows.append({"step": float(step), **stepper.extra_metrics(), **evaluated})

    def add(self, j: int, evaluated: dict) -> None:
        self.rows[j].update(evaluated)

    def frozen(self, stepper: Any, step: int) -> str:
        return f"frozen after step {step}: the gradient underflows to 0"

    def finish(self, stepper: Any, steps: int) -> tuple[dict, np.ndarray, list]:
        names = list(dict.fromkeys(k for row in self.rows for k in row))
        arrays = {k: np.array([row.get(k, np.nan) for row in self.rows], dtype=np.float64) for k in names}
        arrays["step"] = arrays["step"].astype(np.int64)
        return arrays, np.zeros(0, dtype=np.int64), []


def last_finite(arrays: dict[str, np.ndarray], names) -> dict[str, float | None]:
    """Each of ``names``' last finite value along the log grid (None: never finite, or not recorded)."""
    out: dict[str, float | None] = {}
    for name in names:
        v = np.asarray(arrays.get(name, ()), dtype=np.float64)
        ok = v[np.isfinite(v)]
        out[name] = float(ok[-1]) if ok.size else None
    return out


def fmt(v: float | None) -> str:
    """A metric as the summaries print it (n/a for None)."""
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4g}"


def with_se(v: float | None, se: float | None) -> str:
    """A value with its standard error, as the summaries print it."""
    if v is None:
        return "n/a"
    return f"{v:.4g}" if se is None else f"{v:.4g} +- {se:.2g} (se)"


def spread(values: list) -> str:
    """Mean +- standard deviation over seeds (the n/a ones counted apart)."""
    x = np.array([np.nan if v is None else v for v in values], dtype=float)
    ok = x[np.isfinite(x)]
    if not ok.size:
        return "n/a"
    sd = f" +- {np.std(ok, ddof=1):.3g} (sd)" if ok.size > 1 else ""
    missing = f", {x.size - ok.size} n/a" if ok.size < x.size else ""
    return f"{np.mean(ok):.4g}{sd}{missing}"
