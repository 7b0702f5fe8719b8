"""The attention model (SPEC §1-§5, §13): reference, kernels, steppers, engines,
population metrics and the max-margin limit; ``SPEC`` is its ModelSpec."""

from .spec import SPEC

__all__ = ["SPEC"]
