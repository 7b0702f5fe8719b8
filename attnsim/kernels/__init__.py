"""All Numba code of attnsim, one module per model or metric.

- :mod:`.attention` - the attention model: forward pass, hand-derived
  gradients (derivation in its docstring), the many-step GD kernel and the
  gradient-flow vector field.
- :mod:`.encoder` - the one-layer Transformer encoder: its CLS path,
  hand-derived gradients and in-place updates (imported by
  :mod:`attnsim.encoder`).
- :mod:`.population` - the per-point terms of the population metrics: the
  normal tail and the expected softplus of a Gaussian.
- :mod:`._cacheload` - loading kernels from numba's on-disk cache without
  first setting up numba's compiler (installed on import of this package).

A numba function and everything it calls live in one file: numba's on-disk
cache only notices edits to the file of the function it loads.
"""

from . import _cacheload  # noqa: F401  (before any kernel loads)
from .attention import (
    DIVERGED,
    FROZEN,
    LINEAR,
    LOGISTIC,
    N_CHUNKS,
    OK,
    PAR_MIN,
    AttentionModel,
    EvaluationBudgetExceeded,
    FlowField,
    Observation,
    Segment,
    SegmentXW,
    f64,
    loss_and_grads,
    loss_kind_code,
    make_segment,
    outputs,
    state_q,
)
from .population import expected_softplus_series

__all__ = [
    "DIVERGED", "FROZEN", "LINEAR", "LOGISTIC", "N_CHUNKS", "OK", "PAR_MIN", "AttentionModel",
    "EvaluationBudgetExceeded", "FlowField", "Observation", "Segment", "SegmentXW",
    "expected_softplus_series", "f64", "loss_and_grads", "loss_kind_code", "make_segment", "outputs",
    "state_q",
]  # fmt: skip
