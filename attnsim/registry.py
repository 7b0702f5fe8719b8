"""The models attnsim runs: one line each (adding a model is a folder under
``attnsim/models/`` and a line here; docs/design.md gives the steps).

Each entry states, as plain data, what the layers below the models need to
know of a model without importing it: the module of the config keys only it
uses (a frozen dataclass with their defaults and help, refused for the other
models, and their rules), the defaults it changes, the engines it runs in, the
arrays a data file may hold for it and the keys those arrays decide. The key
modules import nothing of attnsim but ``_meta``; they are loaded here, as the
models' plug-in point, when :class:`attnsim.config.Config` is assembled. The
model's code loads on first use of :func:`spec`.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Entry:
    module: str  # the model's package: <module>.spec.SPEC its ModelSpec, <module>.keys its config keys
    defaults: dict[str, Any] = field(default_factory=dict)  # other keys' defaults under this model
    arrays: tuple[str, ...] = ()  # data-file arrays of this model (its parameters)
    decided: dict[str, tuple[str, int]] = field(default_factory=dict)  # key -> (array, axis of its size)
    engines: tuple[str, ...] = ("dense",)  # the coordinates it can run in (config engine = one, or auto)


ENCODER_ARRAYS = (
    "cls",
    "ln1_g",
    "ln1_b",
    "W_qkv",
    "ln2_g",
    "ln2_b",
    "W1",
    "b1",
    "W2",
    "b2",
    "lnf_g",
    "lnf_b",
    "head_w",
    "head_b",
)  # fmt: skip  (the encoder's parameters, in PyTorch's names; SPEC §12)

MODELS: dict[str, Entry] = {
    "attention": Entry(
        "attnsim.models.attention",
        engines=("dense", "reduced", "implicit"),
    ),
    "encoder": Entry(
        "attnsim.models.encoder",
        # the clean-label twin doubles the step loop: cheap for the attention model (its
        # setup is shared), a second full run for the encoder
        defaults={"test_n": 1000, "clean_twin": False},
        arrays=ENCODER_ARRAYS,
        decided={"mlp_dim": ("W1", 0)},
    ),
}


def engines() -> tuple[str, ...]:
    """Every engine some model runs in, in the registry's order."""
    return tuple(dict.fromkeys(e for entry in MODELS.values() for e in entry.engines))


BASE_DEFAULTS = {"test_n": 0, "clean_twin": True}  # what a model's entry does not change


def default(model: str, key: str) -> Any:
    """The default of ``key`` under ``model`` (``model`` unknown: the base default)."""
    entry = MODELS.get(model)
    return BASE_DEFAULTS[key] if entry is None else entry.defaults.get(key, BASE_DEFAULTS[key])


def model_arrays() -> tuple[str, ...]:
    """Every array a data file may hold for some model."""
    return tuple(name for entry in MODELS.values() for name in entry.arrays)


@functools.cache
def keys_module(model: str) -> Any:
    """The model's keys module: ``KEYS`` (a frozen dataclass) and ``check(cfg)``."""
    return importlib.import_module(f"{MODELS[model].module}.keys")


def own_keys(model: str) -> dict[str, Any]:
    """The keys only ``model`` reads, with their defaults."""
    return {f.name: f.default for f in dataclasses.fields(keys_module(model).KEYS)}


def key_fields(model: str) -> tuple:
    """The dataclass fields of the model's keys (name, type, default, help in ``metadata``)."""
    return dataclasses.fields(keys_module(model).KEYS)


def foreign_keys(model: str) -> dict[str, Any]:
    """The keys other models own (with their defaults): ``model`` leaves them at their defaults."""
    own = own_keys(model)
    return {k: v for name in MODELS for k, v in own_keys(name).items() if k not in own}


def owner(key: str) -> str | None:
    """The model that owns ``key`` (None: a key of every model)."""
    return next((name for name in MODELS if key in own_keys(name)), None)


def spec(model: str) -> Any:
    """The model's ModelSpec (its package is imported here, on first use: the registry sits
    below config and data, which every model's code imports)."""
    return importlib.import_module(f"{MODELS[model].module}.spec").SPEC
