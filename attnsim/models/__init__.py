"""One folder per model: ``spec.py`` exposes ``SPEC`` (:class:`attnsim.models.base.ModelSpec`),
``keys.py`` its config keys; the list of models is :mod:`attnsim.registry`."""
