"""The toy's own config key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnsim._meta import ConfigError


@dataclass(frozen=True)
class ToyKeys:
    toy_scale: float = field(
        default=1.0, metadata={"allowed": "> 0 (toy only)", "help": "the head's initial scale"}
    )


def check(cfg: Any) -> None:
    if not cfg.toy_scale > 0:
        raise ConfigError(f"toy_scale: must be > 0, got {cfg.toy_scale}")


KEYS = ToyKeys
