"""One module per optimizer: each exposes ``KEYS`` (its config keys) and ``OPTIMIZER``
(:class:`attnsim.optimizers.base.Optimizer`); the list of optimizers is
:data:`attnsim.registry.OPTIMIZERS`."""
