"""The one-layer Transformer encoder (SPEC §12): parameters, reference, CLS-path kernels
and its stepper; ``SPEC`` is its ModelSpec."""

from .spec import SPEC

__all__ = ["SPEC"]
