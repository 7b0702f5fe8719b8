"""The toy's own config key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnsim._meta import ConfigError


@dataclass(frozen=True)
class ToyKeys:
    toy_scale: float = field(
        default=1.0, metadata={"allowed": "> 0 (toy only)", "help": "the head's initial scale", "probe": 0.5}
    )


@dataclass(frozen=True)
class ToyKeysWithAnUnreadKey(ToyKeys):
    """The mutation test's fault: an own key the toy declares and never reads."""

    toy_shift: float = field(
        default=0.0, metadata={"allowed": "finite (toy only)", "help": "never read", "probe": 1.0}
    )


def check(cfg: Any) -> None:
    if not cfg.toy_scale > 0:
        raise ConfigError(f"toy_scale: must be > 0, got {cfg.toy_scale}")


KEYS = ToyKeys
