"""l_p mirror descent on the query p (Julistiono, Tarzanagh & Azizan, 2024: "Optimizing attention
with mirror descent: generalized max-margin token selection"), plain GD on every other trained
block.

The potential psi(p) = |p|_P^P / P (P = ``mirror_p`` > 1) has the mirror map
grad psi(p)_i = sign(p_i) |p_i|^(P-1), whose inverse is sign(t_i) |t_i|^(1/(P-1)); one step is

    grad psi(p') = grad psi(p) - lr dL/dp.

P = 2 is gradient descent. The step depends on the basis (the l_p norm is not rotation
invariant), so it is exact in a model's own coordinates only. Where every gradient of p points
along one vector a (one selected token against one other in every sample, W fixed), the dual
variable stays on a's line and p / |p| is sign(a) |a|^(1/(P-1)) normalized at every step: the
l_P max-margin direction, the closed form ``tests/test_optimizers.py`` checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._meta import ConfigError
from .base import Optimizer, dense


@dataclass(frozen=True)
class MirrorKeys:
    mirror_p: float = field(
        default=3.0,
        metadata={
            "allowed": "> 1 (optimizer=mirror; 2 is GD)",
            "help": "the exponent P of mirror descent's potential |p|_P^P / P on the query p",
        },
    )


KEYS = MirrorKeys


def check(cfg: Any) -> None:
    if not cfg.mirror_p > 1:
        raise ConfigError(
            f"mirror_p: must be > 1 (the potential |p|_P^P / P is then strictly convex), got {cfg.mirror_p}"
        )


class Mirror(Optimizer):
    name = "mirror"
    coordinatewise = True
    needs = ("p",)

    def __init__(self, keys: Any, lr: float, weight_decay: float = 0.0) -> None:
        super().__init__(keys, lr, weight_decay)
        self.P = float(keys.mirror_p)

    def update(self, params: Mapping[str, Any], grads: Mapping[str, Any], t: int) -> None:
        import numpy as np  # lazy: the keys load with the config, before NumPy

        for k, g in grads.items():
            x = params[k]
            if k != "p":  # plain GD on the other blocks
                x -= self.lr * dense(g)
                continue
            up = self.P - 1.0
            dual = np.sign(x) * np.abs(x) ** up - self.lr * g
            x[...] = np.sign(dual) * np.abs(dual) ** (1.0 / up)


OPTIMIZER = Mirror
