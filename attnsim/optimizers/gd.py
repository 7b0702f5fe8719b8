"""Gradient descent: x <- x - lr (g + weight_decay x), torch.optim.SGD's step (its weight decay
is the coupled L2 term; 0 for the models whose GD has none). The attention model and the encoder
run plain GD in fused kernels of their own; this is the rule for the models that step through
the plug-in (the positional/semantic model) and the reference of every GD step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._meta import ConfigError
from .base import Optimizer, dense

KEYS = None


def check(cfg: Any) -> None:
    """No keys of its own; the coupled decay x <- (1 - lr weight_decay) x - lr g grows without
    bound once lr weight_decay >= 2 (|1 - lr weight_decay| >= 1 whatever the gradient does)."""
    from .. import registry  # lazy: the optimizers' modules load while the registry is assembled

    product = cfg.lr * registry.weight_decay(cfg)
    if product >= 2:
        raise ConfigError(
            f"weight_decay: lr * weight_decay = {cfg.lr:g} * {cfg.weight_decay:g} = {product:.3g} >= 2: "
            "gradient descent's decay step x <- (1 - lr weight_decay) x grows the weights every step; "
            "keep the product below 2 (reduce lr or weight_decay)"
        )


class GD(Optimizer):
    name = "gd"

    def update(self, params: Mapping[str, Any], grads: Mapping[str, Any], t: int) -> None:
        lr, wd = self.lr, self.weight_decay
        for k, g in grads.items():
            x = params[k]
            step = dense(g) + wd * x if wd else dense(g)
            x -= lr * step


OPTIMIZER = GD
