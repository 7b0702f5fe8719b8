"""Normalized gradient descent: every trained block steps by lr g / |g| (Frobenius norm; a zero
gradient takes no step), the step of Tarzanagh et al. (2023) and Vasudeva et al. (2025). It
does not depend on the basis (a rotation keeps every norm), so it is exact in the attention
model's reduced and implicit engines, which run it in their fused GD kernels."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .base import Optimizer, dense

KEYS = None


def check(cfg: Any) -> None:
    return None  # no keys of its own


class Normalized(Optimizer):
    name = "normalized"

    @property
    def rests_at_zero(self) -> bool:
        return True  # a zero gradient takes no step (and there is no decay)

    def update(self, params: Mapping[str, Any], grads: Mapping[str, Any], t: int) -> None:
        from scipy.linalg.blas import ddot  # lazy: the keys load with the config, before SciPy

        for k, g in grads.items():
            g = dense(g)
            flat = g.reshape(-1)
            norm = math.sqrt(ddot(flat, flat))  # SciPy's BLAS, as every product of the encoder's step
            if norm > 0.0:
                params[k] -= (self.lr / norm) * g


OPTIMIZER = Normalized
