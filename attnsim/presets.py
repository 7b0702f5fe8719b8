"""Presets: the settings of the sister papers, by name (SPEC §15).

``--preset NAME`` on the command line, ``preset = "NAME"`` in a TOML file or a
mapping: the preset's keys first, then every key the user sets (so a key set
with the preset overrides it). ``attnsim presets`` lists them with their
sources. A preset is plain data; what it cannot reproduce is said in its
``notes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from .registry import CONDITIONS


@dataclass(frozen=True)
class Preset:
    source: str  # the paper
    setting: str  # what the preset runs, in a line
    values: dict[str, Any] = field(default_factory=dict)  # config keys
    notes: str = ""  # what differs from the paper, and why
    runnable: bool = True  # False: the paper's model is not attnsim's; its boundary is an overlay
    models: tuple[str, ...] = ("attention",)  # the models whose keys the preset sets


PRESETS: dict[str, Preset] = {
    "sakamoto2025": Preset(
        "Sakamoto & Sato, Benign Overfitting in Token Selection of Attention Mechanism, ICML 2025 "
        "(arXiv 2409.17625)",
        "the paper's synthetic setting: attnsim's defaults",
    ),
    "magen2025": Preset(
        "Magen, Shang, Xu, Frei, Hu, Vardi, Benign Overfitting in Single-Head Attention, NeurIPS 2025 "
        "(arXiv 2410.07746)",
        "T = 2: one signal token y mu (no noise) and one noise token N(0, sigma^2 (I - P_mu)), i.i.d. "
        "flips, W = I fixed, p and nu trained from 0, two large GD steps",
        {
            "data_model": "magen2025",
            "T": 2,
            "n_weak_aligned": 0,
            "n_weak_opposite": 0,
            "shuffle_roles": True,
            "label_noise": "iid",
            "noise_rate": 0.1,
            "n": 100,
            "d": 2000,
            "signal_norm": 5.0,
            "train": "p,nu",
            "init_W": "identity",
            "init_p": "zeros",
            "init_nu": "zeros",
            "lr": 0.3,
            "steps": 2,
            "log_every": 1,
            "pop_log_points": 3,
        },
        "SNR = |mu| / (sigma sqrt(d)) = 0.112 = 1.12 / sqrt(n); the paper's step sizes are given up to "
        "constants: lr = 0.3 (lr d = 600) is one at which the second step fits every label here",
    ),
    "tarzanagh2023": Preset(
        "Tarzanagh, Li, Zhang, Oymak, Max-Margin Token Selection in Attention Mechanism, NeurIPS 2023 "
        "(arXiv 2306.13596)",
        "p trained alone with W = I fixed, by normalized GD, towards the p-SVM direction; with label noise",
        {
            "train": "p",
            "init_W": "identity",
            "optimizer": "normalized",
            "d": 200,
            "lr": 0.05,
            "steps": 10000,
            "log_scale": "log",
            "log_points": 40,
            "limit": True,
        },
        "their data are toy sequences without label noise; here the paper's tokens with 20% flips",
    ),
    "jiang2024": Preset(
        "Jiang, Huang, Zhang, Suzuki, Nie, Unveil Benign Overfitting for Transformer in Vision, NeurIPS 2024",
        "their boundary N SNR^2 = const, drawn on attnsim's phase diagrams (figures 3, 6, 13)",
        notes="their model (every token a query; W_Q, W_K, W_V and w_O trained) is not attnsim's, so "
        "the preset has no run: its boundary is an overlay",
        runnable=False,
    ),
}


def resolve(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with its preset's keys under them (``values`` wins); unknown or
    overlay-only presets are refused by the caller's ConfigError (ValueError here)."""
    name = values.get("preset")
    if name is None or name == "":  # "": a config that names no preset (every saved config says so)
        return dict(values)
    if isinstance(name, str):  # names match in any case, as every other choice does
        name = {k.lower(): k for k in PRESETS}.get(name.strip().lower(), name)
    if not isinstance(name, str) or name not in PRESETS:
        names = ", ".join(PRESETS)
        raise ValueError(f"preset: {name!r} is not one of {names} ('attnsim presets' lists them)")
    preset = PRESETS[name]
    if not preset.runnable:
        raise ValueError(f"preset: {name} has no run ({preset.notes})")
    wanted = values.get("model", "attention")
    if wanted not in preset.models:
        own = [k for k, p in PRESETS.items() if wanted in p.models]
        which = f"its presets: {', '.join(own)}" if own else "it has none"
        raise ValueError(
            f"preset: {name} sets the keys of model={' or '.join(preset.models)}, not model={wanted} "
            f"({which})"
        )
    merged = {**preset.values, **values, "preset": name}
    # a preset's key that the user's own keys make inapplicable is dropped (its log_every when the
    # user logs geometrically): the conditions every model's keys obey (registry.CONDITIONS)
    view = SimpleNamespace(**{"log_scale": "linear", **merged})
    for key in preset.values:
        rule = CONDITIONS.get(key)
        if key not in values and rule is not None and not rule[0](view):
            del merged[key]
    return merged


def listing() -> str:
    """What ``attnsim presets`` prints."""
    lines = []
    for name, p in PRESETS.items():
        lines += [f"{name}", f"  source:  {p.source}", f"  setting: {p.setting}"]
        if p.values:
            lines.append("  keys:    " + ", ".join(f"{k}={v}" for k, v in p.values.items()))
        if p.notes:
            lines.append(f"  note:    {p.notes}")
    return "\n".join(lines)
