"""The config keys only the positional/semantic attention model reads (SPEC §18), their
defaults and rules (Cui, Behrens, Krzakala and Zdeborová, NeurIPS 2024).

Imported by :mod:`attnsim.registry` when :class:`attnsim.config.Config` is assembled, so it
imports nothing of attnsim but :mod:`attnsim._meta`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..._meta import ConfigError

TEACHER_A = ((0.6, 0.4), (0.4, 0.6))  # the published runs' A (their which_A = "standard")
# teacher_A's entries: the population error's standard error holds the targets' fourth powers
# (measured: finite up to entries of 1e70, null from 1e80); 1e60 keeps a margin of d and n factors
MAX_ENTRY = 1e60


@dataclass(frozen=True)
class PositionalSemanticKeys:
    alpha: float | None = field(
        default=None,
        metadata={
            "allowed": "> 0, or unset (positional_semantic only)",
            "help": "samples per dimension: n = round(alpha d) (unset: n as given)",
            "probe": {"alpha": 0.5, "n": None},  # n then follows alpha
        },
    )
    omega: float = field(
        default=0.3,
        metadata={
            "allowed": "in [0, 1] (positional_semantic only)",
            "help": "the teacher's positional weight: Y = (1 - omega) softmax(...) xi + omega A xi",
            "probe": 0.6,
        },
    )
    teacher_A: tuple = field(
        default=TEACHER_A,
        metadata={
            "allowed": "a T x T matrix, a nested list (positional_semantic only)",
            "help": "the teacher's positional mixing matrix A",
            "probe": ((0.8, 0.2), (0.3, 0.7)),
        },
    )


def derive(cfg: Any, unset: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The keys ``alpha`` decides: n = round(alpha d) (ConfigError when n is given, ``"n"`` not in
    ``unset``, at another value: its default value given beside alpha is refused too)."""
    if cfg.alpha is None:
        return {}
    if not (math.isfinite(cfg.alpha) and cfg.alpha > 0):
        raise ConfigError(f"alpha: must be > 0, got {cfg.alpha}")
    n = round(cfg.alpha * cfg.d)
    if "n" not in unset and cfg.n != n:
        raise ConfigError(
            f"n: {cfg.n} is not round(alpha d) = {n} (alpha = {cfg.alpha:g}, d = {cfg.d}): "
            "set n or alpha, not both"
        )
    if n < 2:
        raise ConfigError(
            f"alpha: {cfg.alpha:g} makes n = round(alpha d) = {n}; at least 2 samples are needed"
        )
    return {"n": n}


DEFAULT_N = 2000  # n under this model when neither n nor alpha is set (alpha = 2 at d = 1000)
DERIVED = {"n": "alpha"}  # key -> the key that decides it when set (Config.replace decides it again)


def check(cfg: Any) -> None:
    """ConfigError naming the key for a value the model cannot take."""
    if not 0.0 <= cfg.omega <= 1.0:
        raise ConfigError(f"omega: must be in [0, 1], got {cfg.omega}")
    A = cfg.teacher_A
    if len(A) != cfg.T or any(len(row) != cfg.T for row in A):
        widths = {len(r) for r in A}
        shape = f"{len(A)} x {widths.pop()}" if len(widths) == 1 else f"rows of lengths {[len(r) for r in A]}"
        raise ConfigError(
            f"teacher_A: must be a T x T matrix (T = {cfg.T}), got {shape}; give one for this T "
            "(its default is the published 2 x 2 [[0.6, 0.4], [0.4, 0.6]])"
        )
    big = max(abs(v) for row in A for v in row)
    if big > MAX_ENTRY:
        raise ConfigError(
            f"teacher_A: an entry of size {big:.3g} makes the population error's fourth moments overflow "
            "float64; "
            f"keep every entry within {MAX_ENTRY:.0e} (a mixing matrix's are at most about 1)"
        )


KEYS = PositionalSemanticKeys
