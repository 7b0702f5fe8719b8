"""The config keys only the attention model reads, their defaults and rules.

Imported by :mod:`attnsim.registry` when :class:`attnsim.config.Config` is
assembled, so it imports nothing of attnsim but :mod:`attnsim._meta`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..._meta import ConfigError


@dataclass(frozen=True)
class AttentionKeys:
    limit: bool = field(
        default=False,
        metadata={"allowed": "true, false", "help": "compute the max-margin limit of the selection"},
    )


def check(cfg: Any) -> None:
    """ConfigError naming the key for a combination the attention model cannot run."""
    if cfg.limit and not cfg.train_set & {"W", "p"}:
        raise ConfigError(
            "limit: the max-margin limit needs the attention logits to move: train W or p (not nu alone)"
        )
    if cfg.limit and cfg.data_model == "magen2025":
        raise ConfigError("limit: the max-margin limit is built for data_model=sakamoto2025")


KEYS = AttentionKeys
