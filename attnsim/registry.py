"""The models attnsim runs: one line each (adding a model is a folder under
``attnsim/models/`` and a line here; docs/design.md gives the steps).

Each entry states, as plain data, what the layers below the models need to
know of a model without importing it: the config keys only it uses (with
their defaults, refused for the other models), the defaults it changes, the
arrays a data file may hold for it and the keys those arrays decide. The
model's code loads on first use of :func:`spec`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Entry:
    module: str  # the package whose SPEC is the model's attnsim.models.base.ModelSpec
    own_keys: dict[str, Any] = field(default_factory=dict)  # keys only this model reads, with defaults
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
        defaults={"test_n": 0, "clean_twin": True},
        engines=("dense", "reduced", "implicit"),
    ),
    "encoder": Entry(
        "attnsim.models.encoder",
        own_keys={"mlp_dim": 2000, "skip": True, "init_cls_scale": 1.0},
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


def default(model: str, key: str) -> Any:
    """The default of ``key`` under ``model`` (``model`` unknown: the first model's)."""
    return MODELS.get(model, MODELS["attention"]).defaults[key]


def model_arrays() -> tuple[str, ...]:
    """Every array a data file may hold for some model."""
    return tuple(name for entry in MODELS.values() for name in entry.arrays)


def foreign_keys(model: str) -> dict[str, Any]:
    """The keys other models own (with their defaults): ``model`` leaves them at their defaults."""
    own = MODELS[model].own_keys
    return {k: v for entry in MODELS.values() for k, v in entry.own_keys.items() if k not in own}


def owner(key: str) -> str | None:
    """The model that owns ``key`` (None: a key of every model)."""
    return next((name for name, entry in MODELS.items() if key in entry.own_keys), None)


def spec(model: str) -> Any:
    """The model's ModelSpec (its package is imported here, on first use: the registry sits
    below config and data, which every model's code imports)."""
    return importlib.import_module(MODELS[model].module).SPEC
