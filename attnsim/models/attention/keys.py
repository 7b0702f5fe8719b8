"""The config keys only the attention model reads, their defaults and rules.

Imported by :mod:`attnsim.registry` when :class:`attnsim.config.Config` is
assembled, so it imports nothing of attnsim but :mod:`attnsim._meta`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..._meta import FRESH_INTEGRATORS, POPULATION_INTEGRATORS, ConfigError


@dataclass(frozen=True)
class AttentionKeys:
    limit: bool = field(
        default=False,
        metadata={
            "allowed": "true, false",
            "help": "compute the max-margin limit of the selection",
            "probe": True,
        },
    )
    precision_graph: str = field(
        default="qform",
        metadata={
            "choices": ("qform", "official"),
            "probe": {"precision_graph": "official", "precision_twin": "float32"},  # with a twin
            "allowed": "qform, official",
            "help": "the twin's graph: z = X (W p), O(d^2) per step, or the official loop's (X W) p, "
            "O(n T d^2)",
        },
    )


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _check_fresh(c: Any) -> None:
    """The integrators without a training set (SPEC §17): what they can run."""
    if c.integrator not in FRESH_INTEGRATORS:
        return
    what = f"integrator: {c.integrator}"
    _require(c.optimizer == "gd", f"{what} takes plain gradient steps (optimizer=gd)")
    _require(
        c.test_n == 0,
        f"test_n: {c.integrator} measures the population metrics of every state (no test set is drawn); "
        "leave test_n at 0",
    )
    _require(
        c.label_noise == "balanced",
        f"label_noise: {c.integrator} flips each fresh label independently with probability noise_rate "
        "(label_noise orders the flips of a fixed training set); leave it unset",
    )
    _require(c.data_model == "sakamoto2025", f"{what} is built for data_model=sakamoto2025")
    if c.integrator in POPULATION_INTEGRATORS:
        _require(
            c.n == 20,  # the common default: a saved config of these integrators holds it
            f"n: {c.integrator} trains on the population (n -> infinity); leave n unset (its monitor "
            "set is the quadrature's samples)",
        )
        _require(
            c.init_W == "identity",
            f"{what} needs W(0) = I (init_W=identity): then q = W p, nu and every gradient of the "
            "population risk stay in span{mu+, mu-, p(0)} and a few overlaps are the exact state; with a "
            "random W(0) the flow moves q through W(0) W(0)^T, which no fixed set of overlaps closes",
        )
        _require(
            c.batch == 0 or "W" not in c.train_set,
            "batch: the online variance term is derived for W fixed (train = p, nu or p,nu)",
        )
        _require(c.engine == "auto", f"engine: {what} runs in its own overlap coordinates (engine=auto)")
    else:
        _require(
            c.engine != "reduced",
            "engine: online SGD has no training set for the reduced basis to span; "
            "use engine=dense or implicit (auto picks)",
        )


PRECISION_FORMATS = ("none", "float32", "bfloat16", "float64")


def _check_twin(c: Any) -> None:
    """What the precision twin (SPEC §16) runs: GD or AdamW steps of the logistic loss."""
    _require(
        c.precision_graph in ("qform", "official"),
        f"precision_graph: {c.precision_graph!r} (qform or official)",
    )
    if c.precision_twin == "none":
        _require(c.precision_graph == "qform", "precision_graph: applies with precision_twin (float32, ...)")
        return
    what = f"precision_twin: {c.precision_twin}"
    _require(
        c.precision_twin in PRECISION_FORMATS,
        f"precision_twin: {c.precision_twin!r} (one of {', '.join(PRECISION_FORMATS)})",
    )
    _require(c.integrator == "gd", f"{what} follows GD steps (integrator=gd), not {c.integrator}")
    _require(c.optimizer in ("gd", "adam"), f"{what} runs optimizer=gd or adam, not {c.optimizer}")
    _require(c.loss == "logistic", f"{what} follows the official loss log(1 + exp(-y f)) (loss=logistic)")
    _require(
        c.engine != "implicit",
        f"{what} trains torch's d x d W on the run's d-dimensional tokens, which the implicit engine "
        "never forms; use engine=auto, dense or reduced (the twin itself is always d-dimensional: "
        "reduced coordinates would round otherwise than torch does)",
    )


def _check_attention(c: Any) -> None:
    """What StableMax runs: the engines whose kernels score tokens one by one."""
    if c.attention == "softmax":
        return
    what = "attention: stablemax"
    _require(
        c.integrator in ("gd", "flow"),
        f"{what} runs GD or its flow on a training set; the integrators without one are derived "
        f"for the softmax (not integrator={c.integrator})",
    )
    _require(
        c.engine != "implicit",
        f"{what}: the implicit engine is built on the softmax's shift invariance; use engine=auto, "
        "dense or reduced",
    )
    _require(
        c.data_model == "sakamoto2025",
        f"{what}: the population metrics are built for data_model=sakamoto2025",
    )
    _require(
        not c.limit,
        f"{what}: the max-margin limit is the softmax's argmax; StableMax of growing logits is not hard",
    )


def check(cfg: Any) -> None:
    """ConfigError naming the key for a combination the attention model cannot run."""
    _check_fresh(cfg)
    _check_twin(cfg)
    _check_attention(cfg)
    if cfg.limit and not cfg.train_set & {"W", "p"}:
        raise ConfigError(
            "limit: the max-margin limit needs the attention logits to move: train W or p (not nu alone)"
        )
    if cfg.limit and cfg.data_model == "magen2025":
        raise ConfigError("limit: the max-margin limit is built for data_model=sakamoto2025")


KEYS = AttentionKeys
