"""AdamW exactly as torch.optim.AdamW computes it (SPEC §15): defaults betas 0.9 / 0.999, eps
1e-8, decoupled weight decay 0.01 (the common key ``weight_decay``), bias correction as torch
counts updates. Each coordinate is scaled by its own second moment, so the step depends on the
basis: exact in a model's own coordinates only (the attention model's dense engine). The
element-wise updates are Numba kernels (:mod:`attnsim.optimizers.kernels`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._meta import ConfigError
from .base import Optimizer, Outer


@dataclass(frozen=True)
class AdamKeys:
    adam_beta1: float = field(
        default=0.9, metadata={"allowed": "[0, 1) (default 0.9)", "help": "AdamW's first-moment decay"}
    )
    adam_beta2: float = field(
        default=0.999, metadata={"allowed": "[0, 1) (default 0.999)", "help": "AdamW's second-moment decay"}
    )
    adam_eps: float = field(
        default=1e-8,
        metadata={
            "allowed": "> 0 (default 1e-8)",
            "help": "AdamW's eps, added to the root of the second moment",
        },
    )


KEYS = AdamKeys


def check(cfg: Any) -> None:
    for key in ("adam_beta1", "adam_beta2"):
        if not 0 <= getattr(cfg, key) < 1:
            raise ConfigError(f"{key}: must be in [0, 1), got {getattr(cfg, key)}")
    if not cfg.adam_eps > 0:
        raise ConfigError(f"adam_eps: must be > 0, got {cfg.adam_eps}")
    if cfg.optimizer == "adam" and cfg.lr * cfg.weight_decay >= 1:
        raise ConfigError(
            f"weight_decay: lr * weight_decay = {cfg.lr * cfg.weight_decay:.3g} >= 1: AdamW's decay step "
            "w <- (1 - lr weight_decay) w flips the weights' sign or zeroes them every step; keep it below 1"
        )


class AdamW(Optimizer):
    name = "adam"
    coordinatewise = True

    def __init__(self, keys: Any, lr: float, weight_decay: float = 0.0) -> None:
        super().__init__(keys, lr, weight_decay)
        self.b1, self.b2, self.eps = float(keys.adam_beta1), float(keys.adam_beta2), float(keys.adam_eps)
        self.moments: dict[str, tuple[Any, Any]] = {}

    @property
    def rests_at_zero(self) -> bool:
        return False  # the moments move a state whose gradient is zero

    def start(self, params: Mapping[str, Any]) -> None:
        from numpy import zeros  # lazy: the keys load with the config, before NumPy

        self.moments = {k: (zeros(x.shape), zeros(x.shape)) for k, x in params.items()}

    def update(self, params: Mapping[str, Any], grads: Mapping[str, Any], t: int) -> None:
        from numpy import ascontiguousarray  # lazy: as above

        from .kernels import _adamw, _adamw_outer  # lazy: Numba loads with the first step

        b1, b2, eps, wd, lr = self.b1, self.b2, self.eps, self.weight_decay, self.lr
        size, bc2 = lr / (1.0 - b1**t), math.sqrt(1.0 - b2**t)  # t: the update's number, as torch counts
        for k, g in grads.items():
            m, v = self.moments[k]
            x = params[k]
            if isinstance(g, Outer):  # g p^T formed entry by entry inside the kernel
                _adamw_outer(x, g.a, g.b, m, v, lr, b1, b2, eps, wd, size, bc2)
            else:
                flat = x.reshape(-1)  # a view: the steppers' arrays are C-contiguous
                _adamw(flat, ascontiguousarray(g).reshape(-1), m.reshape(-1), v.reshape(-1), lr, b1, b2, eps,
                       wd, size, bc2)  # fmt: skip

    def snapshot(self) -> dict:
        return {k: (m.copy(), v.copy()) for k, (m, v) in self.moments.items()}

    def restore(self, snap: dict) -> None:
        for k, (m, v) in snap.items():
            self.moments[k][0][...] = m
            self.moments[k][1][...] = v


OPTIMIZER = AdamW
