"""One folder per model, each exposing ``SPEC`` (:class:`attnsim.models.base.ModelSpec`);
the list of models is :mod:`attnsim.registry`."""
