"""Figure 17: the paper's dynamics in float64 (the exact run), float32 and bfloat16
(precision twins computed as torch does on CPU, SPEC §16). Four settings of the
default data (20 % flipped labels, W and p trained): d = 200 at |mu| = 20, the
late-generalization setting d = 200 at |mu| = 4.7, figure 5's delayed setting
d = 2000 at |mu| = 10, and AdamW (lr 0.001, torch's defaults otherwise) at d = 200.
Each panel draws the fresh-sample relevant score of the three, marks the step at
which a float32 score first rounds to 1 and the step after which the bfloat16
twin stops moving, and names each one's regime."""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ..config import as_config
from ..plotting import log_steps
from ..results import load
from ..run import simulate
from .common import save, write_numbers

BASE = {"log_scale": "log", "log_points": 80, "pop_log_points": 40, "clean_twin": False}
# (title, keys, steps, quick steps)
SETTINGS = (
    ("d = 200, |mu| = 20, GD", {"d": 200}, 10**6, 10**4),
    ("d = 200, |mu| = 4.7, GD (late generalization)", {"d": 200, "signal_norm": 4.7}, 10**6, 10**4),
    ("d = 2000, |mu| = 10, GD (figure 5)", {"d": 2000, "signal_norm": 10.0}, 10**5, 2000),
    ("d = 200, |mu| = 20, AdamW lr 0.001", {"d": 200, "optimizer": "adam", "lr": 0.001}, 10**5, 5000),
)
FORMATS = ("float32", "bfloat16")


def runs(quick: bool, cache: Path) -> list[tuple[str, dict]]:
    """Per setting, the float32 and bfloat16 runs (each with the same exact run beside it),
    each saved in ``cache`` under its config's hash and read back from there."""
    out = []
    with warnings.catch_warnings():  # a run's warnings stay in its result and go to the numbers file
        warnings.simplefilter("ignore", UserWarning)
        for title, keys, steps, quick_steps in SETTINGS:
            cfg = {**BASE, **keys, "steps": quick_steps if quick else steps}
            out.append((title, {fmt: _cached({**cfg, "precision_twin": fmt}, cache) for fmt in FORMATS}))
    return out


def _cached(cfg: dict, cache: Path):
    folder = cache / "fig17_precision" / as_config(cfg).hash()
    if (folder / "result.json").exists():
        return load(folder)
    res = simulate(cfg)
    res.save(folder)
    return res


def _describe(name: str, final: dict, t_gen, extra: str = "") -> str:
    err = final.get("pop_error")
    gen = "never" if t_gen is None else f"from step {t_gen:g}"
    head = f"{name}: regime {final.get('regime')}, population error {err:.3g}"
    return f"{head}, relevant score >= 0.5 {gen}{extra}"


def draw(ax, title: str, res: dict) -> list[str]:
    """One setting's panel; its numbers."""
    exact = res["float32"]
    tr = exact.trajectory
    x = log_steps(tr["step"])
    m = np.isfinite(tr["pop_score_relevant"])
    ax.plot(x[m], tr["pop_score_relevant"][m], color="k", lw=2, label=f"float64 ({exact.final['regime']})")
    lines = [title, "  " + _describe("float64", exact.final, exact.theory.get("t_generalize"))]
    for fmt, color in zip(FORMATS, ("C0", "C3")):
        r = res[fmt]
        pr, t = r.precision, r.trajectory
        y = t["twin_pop_score_relevant"]
        ok = np.isfinite(y)
        ax.plot(x[ok], y[ok], color=color, ls="--", label=f"{fmt} ({pr['regime']})")
        sat, stop, dep = pr["first_saturated_step"], pr["stopped_at"], pr["departure_step"]
        if sat:
            ax.axvline(sat, color=color, ls=":", lw=1)
        if stop:
            ax.plot([stop], [np.interp(np.log(stop), np.log(x[ok]), y[ok])], "x", color=color, ms=8)
        extra = (
            f"; first score = 1 at step {sat if sat is not None else 'never'}; stops moving after step "
            f"{stop if stop is not None else 'never'}; departs (1 %) at step {dep}; saturated "
            f"{pr['saturated_fraction']:.0%} at the end"
        )
        lines.append("  " + _describe(fmt, pr, pr.get("t_generalize"), extra))
    ax.axhline(0.5, color="0.6", lw=0.8)
    ax.set_xscale("log")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("step")
    ax.set_ylabel("fresh-sample relevant score")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return lines


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    res = runs(quick, cache)
    fig, axes = plt.subplots(1, len(res), figsize=(4.2 * len(res), 3.8))
    lines = [
        "float64 (the exact run), float32 and bfloat16 (precision twins as torch computes on CPU); dotted: "
        "the first step a score rounds to 1; x: the bfloat16 twin stops moving"
    ]
    for ax, (title, r) in zip(axes, res):
        lines += draw(ax, title, r)
    fig.tight_layout()
    return [save(fig, outdir / "fig17_precision.png"), write_numbers(outdir, "fig17_precision", lines)]
