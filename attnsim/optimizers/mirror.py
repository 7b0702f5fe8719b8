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


# the exponents at which the maps stay in float64: the inverse map raises |t| to 1/(P-1), which
# underflows a step's dual to 0 for P near 1 (P = 1.0000001 froze p at 0 after one step); the
# map raises |p| to P-1, which overflows for large P (P = 1e300 turned p into its sign vector)
P_RANGE = (1.01, 100.0)


def check(cfg: Any) -> None:
    lo, hi = P_RANGE
    if not lo <= cfg.mirror_p <= hi:
        raise ConfigError(
            f"mirror_p: must be in [{lo:g}, {hi:g}], got {cfg.mirror_p:.10g}: the potential |p|_P^P / P "
            "needs P > 1, and its map |p|^(P-1) and inverse |t|^(1/(P-1)) under- or overflow float64 outside "
            "this range (P = 2 is gradient descent)"
        )
    if cfg.optimizer != "mirror":
        return
    if "p" not in cfg.train_set:
        raise ConfigError(
            f"optimizer: mirror descent acts on the query p, which train={cfg.train} does not train "
            "(the run would be plain GD); train p or use optimizer=gd"
        )
    if getattr(cfg, "limit", False):
        raise ConfigError(
            "limit: the max-margin limit solves the l2 att-SVM, the limit of gradient descent; mirror "
            f"descent (mirror_p={cfg.mirror_p:g}) converges to the l_p one, which attnsim does not solve"
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
