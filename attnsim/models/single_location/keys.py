"""The config keys only single-location regression reads (SPEC §20; Marion, Berthier, Biau and
Boyer, ICLR 2025), their defaults and rules.

Imported by :mod:`attnsim.registry` when :class:`attnsim.config.Config` is assembled, so it
imports nothing of attnsim but :mod:`attnsim._meta`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..._meta import ConfigError


@dataclass(frozen=True)
class SingleLocationKeys:
    gamma: float = field(
        default=math.sqrt(0.5),
        metadata={
            "allowed": "> 0 (single_location only)",
            "help": "the signal token's noise: x_1 ~ N(sqrt(d/2) k*, gamma^2 I)",
            "probe": 0.9,
        },
    )
    attention_scale: float = field(
        default=0.1,
        metadata={
            "allowed": "> 0 (single_location only)",
            "help": "lambda: the predictor sum_l phi(lambda x_l.k) (x_l.v)",
            "probe": 0.3,
        },
    )
    label_sd: float = field(
        default=0.0,
        metadata={
            "allowed": ">= 0 (single_location only)",
            "help": "eps: y = x_1.v* + eps N(0, 1)",
            "probe": 0.5,
        },
    )
    scale_schedule: bool = field(
        default=False,
        metadata={
            "allowed": "true, false (single_location only)",
            "help": "lambda_t = attention_scale / (1 + 1e-4 t), as the authors' schedule",
            "probe": {"scale_schedule": True, "steps": 4000, "log_every": 4000},
        },
    )


def check(cfg: Any) -> None:
    """ConfigError naming the key for a value or combination the model cannot take."""
    for key in ("gamma", "attention_scale"):
        v = getattr(cfg, key)
        if not (math.isfinite(v) and v > 0):
            raise ConfigError(f"{key}: must be a finite number > 0, got {v}")
    if not (math.isfinite(cfg.label_sd) and cfg.label_sd >= 0):
        raise ConfigError(f"label_sd: must be a finite number >= 0, got {cfg.label_sd}")
    if cfg.T < 1:
        raise ConfigError(
            f"T: must be an integer >= 1 (the tokens; the first carries the signal), got {cfg.T}"
        )
    if cfg.integrator == "population" and cfg.attention != "erf":
        raise ConfigError(
            f"attention: {cfg.attention} has no closed-form population risk; its population PGD is not "
            "built: train it on samples (integrator=gd or online), where its risk is estimated"
        )
    if cfg.integrator == "online" and cfg.batch < 1:
        raise ConfigError("batch: online SGD draws batch fresh samples each step; set batch >= 1")


KEYS = SingleLocationKeys
