"""The config keys only linear attention in context reads (SPEC §21a; Lu, Letey, Zavatone-Veth,
Maiti and Pehlevan, PNAS 2025), their defaults and rules.

Imported by :mod:`attnsim.registry` when :class:`attnsim.config.Config` is assembled, so it
imports nothing of attnsim but :mod:`attnsim._meta`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..._meta import ConfigError


@dataclass(frozen=True)
class LinearICLKeys:
    context_ratio: float = field(
        default=10.0,
        metadata={
            "allowed": "> 0, with l = floor(alpha d) >= 2 (linear_icl only)",
            "help": "alpha: context pairs per dimension, l = alpha d",
            "probe": 5.0,
        },
    )
    task_ratio: float = field(
        default=1.0,
        metadata={
            "allowed": "> 0 with floor(kappa d) >= 1, or inf (linear_icl only)",
            "help": "kappa: pretraining tasks per dimension, k = kappa d (inf: a fresh task per sequence)",
            "infinite": True,
            "probe": 0.5,
        },
    )
    sample_ratio: float = field(
        default=10.0,
        metadata={
            "allowed": "> 0 (linear_icl only)",
            "help": "tau: pretraining sequences per dimension squared, n = tau d^2 (rounded to tasks)",
            "probe": 5.0,
        },
    )
    noise_var: float = field(
        default=0.01,
        metadata={
            "allowed": ">= 0 (linear_icl only)",
            "help": "rho: the labels' noise variance",
            "probe": 0.1,
        },
    )
    ridge: float = field(
        default=1e-6,
        metadata={
            "allowed": ">= 0 (linear_icl only)",
            "help": "lambda: the ridge, (n/d) lambda |Gamma|^2 beside the summed squares (theirs)",
            "probe": 0.5,
        },
    )


def check(cfg: Any) -> None:
    """ConfigError naming the key for a value or combination the model cannot take."""
    d = cfg.d
    a, k, t = cfg.context_ratio, cfg.task_ratio, cfg.sample_ratio
    if not (math.isfinite(a) and a > 0 and int(a * d) >= 2):
        raise ConfigError(
            f"context_ratio: alpha d must give at least 2 context pairs (floor(alpha d) >= 2), got {a}"
        )
    if not (k > 0 and (math.isinf(k) or int(k * d) >= 1)):
        raise ConfigError(
            f"task_ratio: must be > 0 with at least one task (floor(kappa d) >= 1), or inf, got {k}"
        )
    if not (math.isfinite(t) and t > 0):
        raise ConfigError(f"sample_ratio: must be a finite number > 0, got {t}")
    for key in ("noise_var", "ridge"):
        v = getattr(cfg, key)
        if not (math.isfinite(v) and v >= 0):
            raise ConfigError(f"{key}: must be a finite number >= 0, got {v}")
    if cfg.integrator == "flow" and d * (d + 1) > 4500:
        raise ConfigError(
            f"d: the flow's closed form diagonalizes the d(d+1)-square Hessian: d <= 66, got {d} "
            "(GD steps run at any d: integrator=gd)"
        )


KEYS = LinearICLKeys
