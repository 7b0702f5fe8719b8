"""Gradient descent: x <- x - lr (g + weight_decay x), torch.optim.SGD's step (its weight decay
is the coupled L2 term; 0 for the models whose GD has none). The attention model and the encoder
run plain GD in fused kernels of their own; this is the rule for the models that step through
the plug-in (the positional/semantic model) and the reference of every GD step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Optimizer, dense

KEYS = None


def check(cfg: Any) -> None:
    return None  # no keys of its own


class GD(Optimizer):
    name = "gd"

    def update(self, params: Mapping[str, Any], grads: Mapping[str, Any], t: int) -> None:
        lr, wd = self.lr, self.weight_decay
        for k, g in grads.items():
            x = params[k]
            step = dense(g) + wd * x if wd else dense(g)
            x -= lr * step


OPTIMIZER = GD
