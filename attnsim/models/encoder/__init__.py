"""The one-layer Transformer encoder (SPEC §12): parameters, reference, CLS-path kernels
and its stepper; ``spec.SPEC`` is its ModelSpec and ``keys`` its config keys. Nothing
is imported here: the registry loads the keys when the config is assembled, the spec
when the model runs."""
