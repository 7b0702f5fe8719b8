"""The rules a run's config obeys across its keys (SPEC §8): ranges, the scales
float64 can carry, the combinations no model can run. :class:`attnsim.config.Config`
checks them on construction; each model's own rules are in its ``keys.py``."""

from __future__ import annotations

import math
from typing import Any

from . import registry
from ._meta import FRESH_INTEGRATORS, ConfigError

MAX_NORM = 1e100  # token, W(0) and p(0) norms above this overflow float64 in products and squares
MIN_NORM = 1e-100  # a |mu| below this underflows in |mu|^2 products (1e-150 froze, 1e-160 diverged)
FLOW_RTOL_MIN = 100 * 2.220446049250313e-16  # SciPy's solvers raise a smaller rtol to this
FLOW_TOL_MAX = (
    1e-3  # a looser flow tolerance is no longer the gradient flow (atol 1e300: error 0.445, not 0.035)
)
ADAM_KEYS = {"adam_beta1": 0.9, "adam_beta2": 0.999, "adam_eps": 1e-8, "weight_decay": 0.01}


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def validate(c: Any) -> None:
    """ConfigError naming the key of the first rule ``c`` breaks."""
    _require(
        c.n >= 2 or c.n == 0 == c.default("n"),  # 0: the population, for a model whose default it is
        f"n: must be an integer >= 2, got {c.n}",
    )
    _require(c.rank >= 1, f"rank: must be an integer >= 1, got {c.rank}")
    _require(
        math.isfinite(c.init_scale) and c.init_scale >= 0,
        f"init_scale: must be a finite number >= 0, got {c.init_scale}",
    )
    _require(c.d >= 2, f"d: must be an integer >= 2, got {c.d}")
    for key in ("n_relevant", "n_weak_aligned", "n_weak_opposite"):
        _require(getattr(c, key) >= 0, f"{key}: must be an integer >= 0, got {getattr(c, key)}")
    _require(c.n_relevant >= 1, f"n_relevant: must be >= 1, got {c.n_relevant}")
    used = c.n_relevant + c.n_weak_aligned + c.n_weak_opposite
    _require(c.T >= max(used, 1), f"T: must be >= the number of role tokens ({used}), got {c.T}")
    for key in ("signal_norm", "sigma", "lr", "flow_rtol", "flow_atol"):
        _require(getattr(c, key) > 0, f"{key}: must be > 0, got {getattr(c, key)}")
    _require(0 <= c.noise_rate < 1, f"noise_rate: must be in [0, 1), got {c.noise_rate}")
    for key in ("steps", "seed", "test_n", "batch"):
        _require(getattr(c, key) >= 0, f"{key}: must be an integer >= 0, got {getattr(c, key)}")
    _require(c.log_every >= 1, f"log_every: must be an integer >= 1, got {c.log_every}")
    for key in ("log_points", "pop_log_points"):
        _require(getattr(c, key) >= 2, f"{key}: must be an integer >= 2, got {getattr(c, key)}")
    _require(c.pop_seed is None or c.pop_seed >= 0, f"pop_seed: must be an integer >= 0, got {c.pop_seed}")
    pp = c.pop_points
    _require(pp >= 16 and pp & (pp - 1) == 0, f"pop_points: must be a power of two >= 16, got {pp}")
    for key in ("benign_error", "gen_score"):
        _require(0 < getattr(c, key) < 1, f"{key}: must be in (0, 1), got {getattr(c, key)}")
    for key in ("init_W_scale", "init_p_scale"):
        v = getattr(c, key)
        _require(v is None or v > 0, f"{key}: must be > 0, got {v}")
    _require(
        c.init_W_scale is None or c.init_W != "identity",
        "init_W_scale: init_W=identity has no scale; drop init_W_scale or draw W(0) (gaussian, "
        "kaiming_uniform)",
    )
    _require(
        c.init_p_scale is None or c.init_p != "zeros",
        "init_p_scale: init_p=zeros has no scale; drop init_p_scale or set init_p=gaussian",
    )
    _require(
        c.signal_norm >= MIN_NORM,
        f"signal_norm: {c.signal_norm!r} is below {MIN_NORM:.0e}, where |mu|^2 underflows float64 (the "
        f"run would freeze or diverge at step 0); use signal_norm >= {MIN_NORM:.0e}",
    )
    for key in ("flow_rtol", "flow_atol"):
        _require(
            getattr(c, key) <= FLOW_TOL_MAX,
            f"{key}: {getattr(c, key)!r} is above {FLOW_TOL_MAX:g}: the flow's error control would let it "
            "leave the gradient flow it reports; keep it at most that",
        )
    _require(
        c.flow_rtol >= FLOW_RTOL_MIN,
        f"flow_rtol: {c.flow_rtol!r} is below {FLOW_RTOL_MIN:.3g}, the smallest the flow's "
        "integrators resolve in float64 (100 machine epsilons)",
    )
    _check_scales(c)
    for key, default in registry.foreign_keys(c.model).items():
        _require(getattr(c, key) == default, f"{key}: applies to model={registry.owner(key)} only")
    _check_capabilities(c)
    _check_fresh(c)
    _check_reads(c)
    _check_optimizer(c)
    registry.keys_module(c.model).check(c)
    _require(
        c.optimizer == "gd" or c.integrator == "gd",
        f"optimizer: {c.optimizer} is a rule for discrete steps; integrator=flow integrates plain GD's flow",
    )
    if c.data_model == "magen2025":
        _require(
            c.role_counts == (1, 0, 0, 1),
            f"data_model: magen2025 has T = 2 tokens, one signal and one "
            f"noise token (n_weak_* = 0), got role counts {c.role_counts}",
        )
    _require(
        not (c.train == "W" and c.init_p == "zeros"),
        "train: 'W' alone never moves when p(0) = 0 (grad W = g p^T = 0); train p too or set init_p=gaussian",
    )


def _check_reads(c: Any) -> None:
    """Every common key the model does not read (under this integrator) stays at its default
    under the model, and a key read only under a condition on other keys (log_points with a
    geometric grid) is refused without it: one line naming the key and the model, never ignored."""
    entry = registry.MODELS[c.model]
    reads = registry.reads(c.model, c.integrator)
    for key in c.common_keys():
        if key in registry.FRAMEWORK or getattr(c, key) == c.default(key):
            continue
        if key not in reads:
            under = [i for i, keys in entry.reads_with.items() if key in keys]
            if under:
                raise ConfigError(
                    f"{key}: model={c.model} reads it under integrator={' or '.join(under)} only, "
                    f"not {c.integrator}; leave it unset"
                )
            why = f" ({entry.hints[key]})" if key in entry.hints else ""
            raise ConfigError(f"{key}: model={c.model} does not read it{why}; leave it unset")
        applies, words = registry.CONDITIONS.get(key, (None, ""))
        if applies is not None and not applies(c):
            raise ConfigError(f"{key}: applies only with {words}; leave it unset")


def _declared(c: Any, key: str, value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise ConfigError(
            f"{key}: model={c.model} does not run {what} {value} (it runs {', '.join(allowed) or 'none'})"
        )


def _check_capabilities(c: Any) -> None:
    """Refuse what the model's registry entry does not declare (its engines, integrators,
    optimizers, attention normalizations, precision twins and data models), one line each."""
    entry = registry.MODELS[c.model]
    if c.engine not in ("auto",):  # auto: the model's own choice among its engines
        _declared(c, "engine", c.engine, entry.engines, "engine")
    _declared(c, "integrator", c.integrator, entry.integrators, "integrator")
    _declared(c, "optimizer", c.optimizer, registry.optimizers_of(c.model), "optimizer")
    _declared(c, "attention", c.attention, entry.attentions, "attention")
    _declared(c, "precision_twin", c.precision_twin, entry.precision_twins, "precision twin")
    _declared(c, "data_model", c.data_model, entry.data_models, "data model")
    if entry.inits or c.init:  # a model without schemes leaves init empty
        _declared(c, "init", c.init, entry.inits, "initialization")
    rule = registry.optimizer_class(c.optimizer)
    if rule.coordinatewise and c.engine not in ("auto", *entry.coordinate_engines):
        raise ConfigError(
            f"engine: {c.engine} is not exact for optimizer={c.optimizer} (its step depends on the basis, "
            f"which the {c.engine} engine rotates); use engine="
            f"{' or '.join(entry.coordinate_engines)} or auto"
        )


def check_data_source(model: str, source: str) -> None:
    """Refuse a data source (``file``: an .npz of arrays; ``real``: a real-data protocol) the
    model does not declare."""
    allowed = registry.MODELS[model].data_sources
    if source not in allowed:
        what = {"file": "a data file (--data FILE.npz)", "real": "real data (attnsim real)"}.get(
            source, source
        )
        raise ConfigError(f"data: model={model} does not run on {what} (its data: {', '.join(allowed)})")


def _check_optimizer(c: Any) -> None:
    """The optimizers' own keys: the run's are checked by its optimizer, the others' must be at
    their defaults; ``weight_decay`` applies where the model's optimizer applies it."""
    for name in registry.OPTIMIZERS:
        if name != c.optimizer:
            for key, default in registry.optimizer_keys(name).items():
                _require(getattr(c, key) == default, f"{key}: applies to optimizer={name}")
    _require(c.weight_decay >= 0, f"weight_decay: must be >= 0, got {c.weight_decay}")
    with_decay = registry.MODELS[c.model].weight_decay_with
    _require(
        c.optimizer in with_decay or c.weight_decay == ADAM_KEYS["weight_decay"],
        f"weight_decay: applies to optimizer={' or '.join(with_decay)} (model={c.model})",
    )
    registry.optimizer_module(c.optimizer).check(c)


def _check_fresh(c: Any) -> None:
    """``batch`` belongs to the integrators without a training set (the model checks the rest)."""
    if c.integrator not in FRESH_INTEGRATORS:
        _require(
            c.batch == 0,
            f"batch: applies to integrator=online, population or population_flow, not {c.integrator}",
        )


def _check_scales(c: Any) -> None:
    """Refuse settings whose initial tokens, W(0), p(0) or logits overflow float64.

    Norms: tokens |rho mu|, |mu| and sigma sqrt(d); W(0) about its entry scale
    times sqrt(d) (1 for identity); p(0) its scale times sqrt(d) when drawn.
    Each must stay below MAX_NORM and their product (the logits) and |W p|
    below MAX_NORM^1.5, so that squares and Gram matrices stay finite.
    """
    root_d = math.sqrt(c.d)
    parts = {
        "signal_norm": c.signal_norm,
        "rho": abs(c.rho) * c.signal_norm,
        "sigma": c.sigma * root_d,
        "init_W_scale": c.W_scale * root_d,  # checked even when unused: a value that cannot work
        "init_p_scale": c.p_scale * root_d,
    }
    what = {
        "signal_norm": "|mu|",
        "rho": "|rho mu|",
        "sigma": "sigma sqrt(d)",
        "init_W_scale": "the scale of W(0) (init_W_scale sqrt(d))",
        "init_p_scale": "|p(0)| (init_p_scale sqrt(d))",
    }
    for key, v in parts.items():
        _require(
            v <= MAX_NORM,
            f"{key}: {getattr(c, key)!r} makes {what[key]} = {v:.3g}, which overflows float64 "
            f"in products; keep it below {MAX_NORM:.0e}",
        )
    token = max(parts["signal_norm"], parts["rho"], parts["sigma"])
    w = 1.0 if c.init_W == "identity" else parts["init_W_scale"]
    p = parts["init_p_scale"] if c.init_p == "gaussian" else 0.0
    if token * w * p > MAX_NORM**1.5 or w * p > MAX_NORM**1.5:
        key = "init_p_scale" if p >= w else "init_W_scale"
        raise ConfigError(
            f"{key}: initial logits x . W(0) p(0) of about {token * w * p:.3g} overflow float64"
        )
