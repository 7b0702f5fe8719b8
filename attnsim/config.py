"""Typed, validated run configuration (SPEC §8), read from TOML and ``--set``.

Every key has a default; every value is checked on construction. Bad input
raises :class:`ConfigError`, which the command line turns into exit code 2
with one line naming the key and what is allowed.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import hashlib
import json
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from . import registry
from ._meta import ConfigError
from .config_files import MAX_TOML_BYTES, file_data, load_toml, read_toml, regular_file  # noqa: F401
from .config_rules import ADAM_KEYS, validate
from .config_values import (  # noqa: F401  (TRAIN_BLOCKS, normalize_train: part of this module's interface)
    _PLAIN,
    MAX_INT,
    TRAIN_BLOCKS,
    _numpy_bool,
    _subnormal,
    matrix,
    normalize_train,
    parse_scalar,
    scalar,
)
from .presets import PRESETS, resolve
from .words import suggest


@dataclass(frozen=True)
class CommonKeys:
    """The keys of every model (the models' own keys are their ``keys.py`` dataclasses)."""

    n: int = 20
    T: int = 8
    d: int = 2000
    signal_norm: float = 20.0
    sigma: float = 1.0
    rho: float = 0.1
    n_relevant: int = 1
    n_weak_aligned: int = 1
    n_weak_opposite: int = 1
    shuffle_roles: bool = False
    data_model: str = "sakamoto2025"
    noise_rate: float = 0.2
    label_noise: str = "balanced"
    lr: float = 5e-3
    optimizer: str = "gd"  # the optimizers' own keys follow it (attnsim/optimizers/)
    weight_decay: float = 0.01
    steps: int = 1000
    train: str = "W,p"
    init_W: str = "kaiming_uniform"
    init_W_scale: float | None = None
    init_p: str = "zeros"
    init_p_scale: float | None = None
    init_nu: str = "head"
    init: str = ""  # the model's initialization scheme ("": a model with none; registry Entry.inits)
    init_scale: float = 0.0  # the scale of a model's initial weights (the models that read it say how)
    rank: int = 1  # the rank of a model's key-query product (the models that read it)
    loss: str = "logistic"
    seed: int = 0
    test_n: int = 0
    engine: str = "auto"
    integrator: str = "gd"
    batch: int = 0  # online SGD's fresh samples per step (0: n); population: 0 = the exact risk
    flow_method: str = "RK45"
    flow_rtol: float = 1e-8
    flow_atol: float = 1e-10
    log_scale: str = "linear"
    log_every: int = 10
    log_points: int = 100
    pop_log_points: int = 50
    pop_points: int = 4096
    pop_seed: int | None = None  # None: the population's points follow seed
    benign_error: float = 0.05
    gen_score: float = 0.5
    clean_twin: bool = True
    model: str = "attention"
    attention: str = "softmax"  # the scores' normalization (softmax or StableMax)
    refine_times: str = "auto"  # locate the times between log points: auto = with the flow or the limit
    precision_twin: str = "none"  # a twin of the run in float32 or bfloat16 (SPEC §16)
    preset: str = ""  # the preset the other keys started from ("": none); a label, never hashed


class _ConfigMethods:
    """What a Config does beyond holding its keys (the base of the assembled class)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, _coerce(f.name, getattr(self, f.name)))
        unset = frozenset(key for key in _MODEL_DEFAULTED if getattr(self, key) is None)
        for key in unset:  # None: the model's default (the registry's entry)
            object.__setattr__(self, key, _model_default(self.model, key))
        for key, value in _derived(self, unset).items():  # keys the model's own keys decide (alpha: n)
            object.__setattr__(self, key, value)
        # a saved config (result.json's, resolved) holds the default scales an initialization without
        # a scale has: the same as leaving them out, so the config runs again as it was saved
        # (any initialization: the encoder, which has its own, holds them too)
        if self.init_W_scale == 1.0 / math.sqrt(3 * self.d):
            object.__setattr__(self, "init_W_scale", None)
        if self.init_p_scale == 1.0 / math.sqrt(self.d):
            object.__setattr__(self, "init_p_scale", None)
        validate(self)
        if self.preset and not _RESOLVING.get():
            _check_preset_applied(self)

    def default(self, key: str) -> Any:
        """The default of ``key`` under this config's model (a common key's, or the model's own)."""
        return _model_default(self.model, key) if key in _COMMON else _DEFAULTS[key]

    @staticmethod
    def common_keys() -> tuple[str, ...]:
        """The keys of every model (:class:`CommonKeys`), in their order."""
        return _COMMON

    # -- derived quantities -------------------------------------------------
    @property
    def train_set(self) -> frozenset[str]:
        return frozenset(self.train.split(","))

    @property
    def W_scale(self) -> float:
        """Standard deviation of W(0) entries (kaiming_uniform, gaussian)."""
        return self.init_W_scale if self.init_W_scale is not None else 1.0 / math.sqrt(3 * self.d)

    @property
    def p_scale(self) -> float:
        return self.init_p_scale if self.init_p_scale is not None else 1.0 / math.sqrt(self.d)

    @property
    def role_counts(self) -> tuple[int, int, int, int]:
        """Tokens per role: relevant, weak aligned, weak opposite, irrelevant."""
        used = self.n_relevant + self.n_weak_aligned + self.n_weak_opposite
        return (self.n_relevant, self.n_weak_aligned, self.n_weak_opposite, self.T - used)

    def replace(self, **changes: Any) -> Any:
        """A copy with ``changes``; a key at its model's default follows a change of model."""
        if "model" in changes:
            for key in _MODEL_DEFAULTED:
                if key not in changes and getattr(self, key) == _model_default(self.model, key):
                    changes[key] = None
        model = changes.get("model", self.model)
        derived = getattr(registry.keys_module(model), "DERIVED", {}) if model in registry.MODELS else {}
        for key, source in derived.items():  # decided again from the changed keys (n from alpha and d)
            if key not in changes and changes.get(source, getattr(self, source, None)) is not None:
                changes[key] = None
        if changes.get("preset", self.preset) != self.preset:  # a new preset label: checked as given
            return dataclasses.replace(self, **changes)
        token = _RESOLVING.set(True)  # the preset this config was built from: already applied
        try:
            return dataclasses.replace(self, **changes)
        finally:
            _RESOLVING.reset(token)

    def to_dict(self, resolved: bool = True) -> dict[str, Any]:
        """All keys; with ``resolved`` the default scales are filled in."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in _MATRICES:  # held as tuples (a Config is hashable), written as nested lists (JSON, TOML)
            out[key] = [list(row) for row in out[key]]
        for key in _INFINITE:  # JSON has no infinity: written "inf", read back as math.inf
            if out[key] == math.inf:
                out[key] = "inf"
        if resolved:
            out["init_W_scale"] = self.W_scale
            out["init_p_scale"] = self.p_scale
        return out

    def hash(self) -> str:
        """Short stable hash of the resolved configuration."""
        text = json.dumps(hashed(self.to_dict()), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]


def _assemble() -> type:
    """Config: the common keys, with every registered optimizer's own keys after ``optimizer``
    and every registered model's keys after ``model`` (their dataclasses,
    :func:`attnsim.registry.key_fields`, :func:`attnsim.registry.optimizer_fields`), as one
    frozen dataclass. A common key some model gives a default of its own defaults to None
    there, the model's default, filled in on construction."""
    common = fields(CommonKeys)
    clashes = registry.key_collisions(tuple(f.name for f in common))
    if clashes:  # a registry edit's mistake: said at once, naming the key and its owners
        raise RuntimeError(f"attnsim's registry declares names twice: {'; '.join(clashes)}")
    after = {
        "optimizer": [f for name in registry.OPTIMIZERS for f in registry.optimizer_fields(name)],
        "model": [f for name in registry.MODELS for f in registry.key_fields(name)],
    }
    ordered = [g for f in common for g in (f, *after.get(f.name, ()))]
    spec = [
        (f.name, f"{f.type} | None" if f.name in _MODEL_DEFAULTED else f.type,
         dataclasses.field(default=None if f.name in _MODEL_DEFAULTED else f.default))
        for f in ordered
    ]  # fmt: skip
    doc = """All settings of one run: a frozen dataclass of the common keys, every registered
    optimizer's keys and every registered model's (``attnsim keys`` and docs/usage.md give
    their meanings, defaults and allowed values).

    Parameters
    ----------
    **keys
        Any config key; the rest take their defaults (a common key some model defaults
        otherwise takes that model's default: ``Config(model="positional_semantic").n`` is 2000).

    Raises
    ------
    ConfigError
        On construction, naming the key of the first rule the keys break: a range, a
        combination, a capability the model does not declare, a common key it does not read
        (:mod:`attnsim.config_rules`), another model's or optimizer's key.

    Examples
    --------
    >>> from attnsim.config import Config
    >>> cfg = Config(d=4500, signal_norm=5)
    >>> cfg.replace(steps=2000).steps
    2000
    >>> Config(model="encoder", pop_points=1024)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attnsim._meta.ConfigError: pop_points: model=encoder does not read it ...
    """
    return dataclasses.make_dataclass(
        "Config",
        spec,
        bases=(_ConfigMethods,),
        frozen=True,
        namespace={"__doc__": doc, "__module__": __name__},
    )


_MODEL_DEFAULTED = tuple(sorted(registry.model_defaults()))  # common keys some model defaults otherwise
_COMMON = tuple(f.name for f in fields(CommonKeys))
Config = _assemble()
_DEFAULTS = {f.name: f.default for f in fields(Config)}


def _derived(cfg: Any, unset: frozenset[str]) -> dict[str, Any]:
    """The keys the model's keys module derives from others (its ``derive(cfg, unset)``, ``unset``
    the model-defaulted keys the user left out, so that a key given at its default value is still
    a key given; none by default)."""
    derive = (
        getattr(registry.keys_module(cfg.model), "derive", None) if cfg.model in registry.MODELS else None
    )
    return {} if derive is None else derive(cfg, unset)


def _model_default(model: str, key: str) -> Any:
    """The default of the common ``key`` under ``model`` (an unknown model: the common default)."""
    entry = registry.MODELS.get(model)
    base = getattr(CommonKeys, key)
    return base if entry is None else entry.defaults.get(key, base)


# keys added after records existed: at these values they hash as if absent, so every
# record and run folder written before them keeps its key
LATER_KEYS = {
    "optimizer": "gd",
    **ADAM_KEYS,
    "attention": "softmax",
    "data_model": "sakamoto2025",
    "init_nu": "head",
    "preset": "",
    "refine_times": "auto",
    "batch": 0,
    "precision_twin": "none",
    "pop_seed": None,
}


# the models' own keys that hashes have always included; any other model key at its default
# is left out of the hash, so registering a model (or adding a key to one) moves no record key
HASHED_MODEL_KEYS = ("limit", "mlp_dim", "skip", "init_cls_scale")


@functools.cache
def _neutral() -> dict[str, Any]:
    """Every key that hashes as if absent at its value here: the LATER_KEYS, and the models' and
    optimizers' own keys at their defaults."""
    own = {
        k: v for m in registry.MODELS for k, v in registry.own_keys(m).items() if k not in HASHED_MODEL_KEYS
    }
    optimizers = {k: v for o in registry.OPTIMIZERS for k, v in registry.optimizer_keys(o).items()}
    own = {
        k: [list(row) for row in v] if k in _MATRICES else v for k, v in own.items()
    }  # as to_dict writes them
    return {**own, **optimizers, **LATER_KEYS}


# common keys added after records existed whose neutral value is their model's default (init and
# rank were positional_semantic's own keys, hashed as absent at their defaults, before every model
# could have one; init_scale linear_icl's)
MODEL_NEUTRAL_KEYS = ("init", "init_scale", "rank")


def hashed(config: dict) -> dict:
    """The config as hashes see it: the neutral keys at their neutral values left out."""
    model = config.get("model")
    neutral = {**_neutral(), **{k: _model_default(model, k) for k in MODEL_NEUTRAL_KEYS}}
    return {k: v for k, v in config.items() if k != "preset" and not (k in neutral and v == neutral[k])}


KEYS = tuple(f.name for f in fields(Config))
_TYPES = {f.name: f.type for f in fields(Config)}
_MATRICES = tuple(name for name, t in _TYPES.items() if str(t).startswith("tuple"))
_CHOICES = {
    "label_noise": ("balanced", "exact", "iid"),
    "init_W": ("kaiming_uniform", "gaussian", "identity"),
    "init_p": ("zeros", "gaussian"),
    "loss": ("logistic", "linear"),
    "engine": ("auto", *registry.engines()),
    "integrator": registry.capability("integrators"),
    "optimizer": registry.capability("optimizers"),
    "data_model": registry.capability("data_models"),
    "init_nu": ("head", "zeros"),
    "init": ("", *registry.capability("inits")),
    "preset": ("", *PRESETS),
    "flow_method": ("RK45", "DOP853"),
    "log_scale": ("linear", "log"),
    "refine_times": ("auto", "true", "false"),
    "precision_twin": registry.capability("precision_twins"),
    "attention": registry.capability("attentions"),
    "model": tuple(registry.MODELS),
    # the models' and optimizers' own word-valued keys (their field metadata's "choices")
    **{
        f.name: tuple(f.metadata["choices"])
        for fs in (
            *(registry.key_fields(m) for m in registry.MODELS),
            *(registry.optimizer_fields(o) for o in registry.OPTIMIZERS),
        )
        for f in fs
        if "choices" in f.metadata
    },
}
# the models' float keys that admit infinity (their field metadata's "infinite": a count per d that
# may be unbounded, linear_icl's task_ratio); "inf" in TOML, --set, JSON records and result files
_INFINITE = tuple(
    f.name for m in registry.MODELS for f in registry.key_fields(m) if f.metadata.get("infinite")
)


def _is_inf(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("inf", "+inf", "infinity")
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value == math.inf


_BOOL_WORDS = ("refine_times",)  # word-valued keys whose "true" and "false" TOML writes as booleans


@functools.cache
def _kind(name: str) -> str:
    t = str(_TYPES[name])
    for k in ("bool", "int", "float", "str"):
        if t.startswith(k):
            return k
    if t.startswith("tuple"):
        return "matrix"
    raise AssertionError(t)  # pragma: no cover


def _coerce(name: str, value: Any) -> Any:
    """A value of the key's type: Python or NumPy bools, integers and reals
    (``np.int64``, ``np.float32``, ``np.bool_``), never text: the Python API
    takes values, the command line parses text first (:func:`parse_set`)."""
    kind = _kind(name)
    if name in _INFINITE and _is_inf(value):  # a key that admits infinity ("inf" in files and records)
        return math.inf
    if type(value) is _PLAIN.get(kind) and (kind != "float" or math.isfinite(value)):  # already fine (sweeps)
        if (kind != "int" or abs(value) <= MAX_INT) and (kind != "float" or not _subnormal(value)):
            return value + 0.0 if kind == "float" else value  # -0.0 is 0.0: one grid point, one record
    if value is None:
        if (
            name in ("init_W_scale", "init_p_scale")
            or name in _MODEL_DEFAULTED
            or "None" in str(_TYPES[name])
        ):
            return None
        raise ConfigError(f"{name}: a value is required")
    if kind == "str" and name in _BOOL_WORDS and (isinstance(value, bool) or _numpy_bool(value)):
        value = "true" if value else "false"  # refine_times = true in TOML, --set refine_times=true
    if kind == "matrix":
        return matrix(name, value)
    if isinstance(value, str) and kind != "str":
        want = {"bool": "true or false", "int": "an integer", "float": "a number"}[kind]
        raise ConfigError(f"{name}: expected {want}, got the text {value!r}")
    if kind in ("bool", "int", "float"):
        return scalar(name, kind, value)
    if name == "train" and isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        value = ",".join(value)  # ["W", "p"], as TOML and Python write a set of blocks
    if not isinstance(value, str):
        raise ConfigError(f"{name}: expected a string, got {value!r}")
    if name == "train":
        return normalize_train(value)
    if name in _CHOICES:
        lookup = {c.lower(): c for c in _CHOICES[name]}
        if value.lower() not in lookup:
            allowed = ", ".join(c or '""' for c in _CHOICES[name])  # "" (the preset key: none) shown as such
            raise ConfigError(f"{name}: {value!r} is not one of {allowed}")
        return lookup[value.lower()]
    return value


_RESOLVING = contextvars.ContextVar("resolving", default=False)  # from_mapping laid a preset's keys under


def _check_preset_applied(cfg: Any) -> None:
    """A Config built with ``preset`` but not from a mapping (``Config(preset=...)``,
    ``.replace(preset=...)``) holds its keys as given: refused when they are not the preset's,
    rather than recorded under a setting it did not run."""
    values = PRESETS[cfg.preset].values
    wrong = next((k for k, v in values.items() if getattr(cfg, k) != v), None)
    if wrong is not None:
        raise ConfigError(
            f"preset: {cfg.preset} sets {wrong} = {values[wrong]!r}, but this Config holds {wrong} = "
            f"{getattr(cfg, wrong)!r}: a Config keeps its keys as given; start from the preset with "
            f"attnsim.make_config(preset={cfg.preset!r}, ...) or attnsim.simulate(..., preset={cfg.preset!r})"
        )


def unknown_key_message(key: str) -> str:
    if key == "data":  # the data is not a run's key: it is named beside the config
        return (
            'data: not a config key: name a data file with --data FILE (attnsim run), data = "FILE" at '
            "the top of a run's TOML file, or data = \"FILE\" in a sweep file's [sweep] table"
        )
    near = suggest(key, KEYS)
    hint = f"; did you mean {near!r}?" if near else f"; valid keys: {', '.join(KEYS)}"
    return f"unknown config key {key!r}{hint}"


def from_mapping(values: Mapping[str, Any], base: Config | None = None) -> Config:
    """Build a Config from a mapping of overrides (unknown keys are errors)."""
    for key in values:
        if not isinstance(key, str):
            raise ConfigError(f"config keys are strings (names such as 'd' or 'lr'), got {key!r}")
        if key not in KEYS:
            raise ConfigError(unknown_key_message(key))
    try:
        values = resolve(values)  # a preset's keys under the user's
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    token = _RESOLVING.set(True)
    try:
        return Config(**values) if base is None else base.replace(**values)
    finally:
        _RESOLVING.reset(token)


def parse_set(items: list[str]) -> dict[str, Any]:
    """Turn ``["key=value", ...]`` into a mapping, rejecting malformed items."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise ConfigError(f"--set: expected key=value, got {item!r}")
        if key not in KEYS:
            raise ConfigError(unknown_key_message(key))
        out[key] = parse_scalar(value)
    return out


def config_values(path: str | Path | None = None, sets: list[str] | None = None) -> dict[str, Any]:
    """The keys a user set: an optional TOML file, then ``--set`` items (not yet validated)."""
    values: dict[str, Any] = {}
    if path is not None:
        values.update(load_toml(path))
    values.update(parse_set(sets or []))
    return values


def make_config(path: str | Path | None = None, sets: list[str] | None = None, **overrides: Any) -> Config:
    """Config from an optional TOML file, then ``--set`` items, then keywords."""
    return from_mapping({**config_values(path, sets), **overrides})


def as_config(config: Config | Mapping[str, Any] | None) -> Config:
    if config is None:
        return Config()
    if isinstance(config, Config):
        return config
    if isinstance(config, Mapping):
        return from_mapping(config)
    raise ConfigError(f"config: expected a mapping or Config, got {type(config).__name__}")
