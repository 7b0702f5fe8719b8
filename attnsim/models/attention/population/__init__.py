"""The population metrics of the attention model: a fresh clean sample's error, loss
and role scores for a state's few scalars (SPEC §5), one role per module.

- :mod:`.metrics`: :class:`Population` (the error from the tail, the loss and the scores
  from quasi-random points), its point sets and caches, a state's scalars;
- :mod:`.tail`: the error by importance sampling around its design points;
- :mod:`.loss`: the expected loss given the logit noises;
- :mod:`.hard_limit`: the hard-attention limit by quadrature;
- :mod:`.sobol`: the scrambled Sobol points;
- :mod:`.magen`: the population of data_model = magen2025 (one-dimensional quadrature);
- the kernels: ``pop_kernels`` (per-point terms, the tail's estimate), ``moment_kernels``
  (conditional moments, Gauss-Hermite), ``design_kernels`` (design points, components),
  ``sample_kernels`` (drawing from the components).
"""

from .hard_limit import hard_limit_terms
from .loss import HERMITE_NODES, expected_softplus, hermite_rule, softplus
from .metrics import (
    Population,
    cached_points,
    cached_population,
    population_points,
    state_scalars,
    tail_count,
    uniform_error,
)

__all__ = [
    "HERMITE_NODES",
    "Population",
    "cached_points",
    "cached_population",
    "expected_softplus",
    "hard_limit_terms",
    "hermite_rule",
    "population_points",
    "softplus",
    "state_scalars",
    "tail_count",
    "uniform_error",
]
