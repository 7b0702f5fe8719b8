"""The config keys only multi-head linear attention in context reads (SPEC §21b; Zhang, Singh,
Latham and Saxe, ICML 2025), their defaults and rules (its rank and init_scale are common keys:
positional_semantic's rank and linear_icl's init_scale mean the same).

Imported by :mod:`attnsim.registry` when :class:`attnsim.config.Config` is assembled, so it
imports nothing of attnsim but :mod:`attnsim._meta`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..._meta import ConfigError

PARAMETRIZATIONS = ("separate", "merged")
SPECTRA = ("linear", "identity")


@dataclass(frozen=True)
class LinearAttentionKeys:
    context: int = field(
        default=31,
        metadata={
            "allowed": "integer >= 1 (linear_attention only)",
            "help": "N: context pairs per sequence",
            "probe": 7,
        },  # fmt: skip
    )
    heads: int = field(
        default=5,
        metadata={
            "allowed": "integer >= 1 (linear_attention only)",
            "help": "H: attention heads",
            "probe": 2,
        },
    )
    parametrization: str = field(
        default="separate",
        metadata={
            "choices": PARAMETRIZATIONS,
            "allowed": "separate, merged (linear_attention only)",
            "help": "separate rank-r key and query per head (ATTN_S) or a merged key-query matrix (ATTN_M)",
            "probe": "merged",
        },
    )
    spectrum: str = field(
        default="linear",
        metadata={
            "choices": SPECTRA,
            "allowed": "linear, identity (linear_attention only)",
            "help": "the input covariance's eigenvalues: proportional to D, D-1, ..., 1, or equal; trace 1",
            "probe": "identity",
        },
    )


def check(cfg: Any) -> None:
    """ConfigError naming the key for a value or combination the model cannot take."""
    for key in ("context", "heads"):
        if getattr(cfg, key) < 1:
            raise ConfigError(f"{key}: must be an integer >= 1, got {getattr(cfg, key)}")
    if cfg.parametrization == "merged" and cfg.rank != 1:
        raise ConfigError("rank: a merged key-query matrix has no rank of its own (parametrization=separate)")
    if cfg.rank > cfg.d:
        raise ConfigError(
            f"rank: at most d = {cfg.d} (the key and query act on the d inputs), got {cfg.rank}"
        )
    if cfg.integrator == "flow" and cfg.n:
        raise ConfigError(
            "n: the flow follows the population loss; leave n unset (GD on n sequences: integrator=gd)"
        )


KEYS = LinearAttentionKeys
