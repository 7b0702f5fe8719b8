"""The config keys only the encoder reads (SPEC §12), their defaults and rules.

Imported by :mod:`attnsim.registry` when :class:`attnsim.config.Config` is
assembled, so it imports nothing of attnsim but :mod:`attnsim._meta`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..._meta import ConfigError


@dataclass(frozen=True)
class EncoderKeys:
    mlp_dim: int = field(
        default=2000,
        metadata={"allowed": "integer >= 1 (encoder only)", "help": "the encoder's MLP width", "probe": 3},
    )
    skip: bool = field(
        default=True,
        metadata={
            "allowed": "true, false (encoder only)",
            "help": "the encoder's residual connections",
            "probe": False,
        },
    )
    init_cls_scale: float = field(
        default=1.0,
        metadata={
            "allowed": "> 0 (encoder only)",
            "help": "standard deviation of the CLS token",
            "probe": 0.3,
        },
    )


def check(cfg: Any) -> None:
    """ConfigError naming the key for a value the encoder cannot take."""
    if cfg.mlp_dim < 1:
        raise ConfigError(f"mlp_dim: must be an integer >= 1, got {cfg.mlp_dim}")
    if not cfg.init_cls_scale > 0:
        raise ConfigError(f"init_cls_scale: must be > 0, got {cfg.init_cls_scale}")
    if cfg.precision_twin != "none":
        what = f"precision_twin: {cfg.precision_twin}"
        if cfg.optimizer not in ("gd", "adam"):
            raise ConfigError(
                f"{what}: the encoder's twin steps as torch's SGD or AdamW (optimizer=gd or adam)"
            )
        if cfg.loss != "logistic":
            raise ConfigError(f"{what} follows the official loss log(1 + exp(-y f)) (loss=logistic)")


KEYS = EncoderKeys
