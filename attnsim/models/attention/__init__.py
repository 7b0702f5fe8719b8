"""The attention model (SPEC §1-§5, §13): reference, kernels, steppers, engines,
population metrics and the max-margin limit; ``spec.SPEC`` is its ModelSpec and
``keys`` its config keys. Nothing is imported here: the registry loads the keys
when the config is assembled, the spec when the model runs."""
