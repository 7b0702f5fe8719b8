"""Figure 17: the paper's dynamics in float64 (the exact run), float32 and bfloat16
(precision twins computed as torch does on CPU, SPEC §16). Top row, the softmax on
five settings of the default data (20 % flipped labels, W and p trained): d = 200
at |mu| = 20, the late-generalization setting d = 200 at |mu| = 4.7, figure 5's
delayed setting d = 2000 at |mu| = 10, and AdamW at d = 200: at lr 0.001 (torch's
defaults otherwise) and at the Hugging Face Trainer's defaults of the paper's
real-data protocol (lr 5e-5, no weight decay; the Trainer's linear decay of lr is
not modelled: the lr is constant). Bottom row, the same d = 200 settings with StableMax
(``attention = stablemax``) for the softmax, and figure 8's question at a finite
horizon: the signal from which GD generalizes within 3e5 steps (d = 200), in each
precision. Each dynamics panel draws the fresh-sample relevant score of the three,
marks the step at which a float32 score first rounds to 1 and the step after which
the bfloat16 twin stops moving, and names each one's regime."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnsim.config import as_config
from attnsim.metrics import format_error
from attnsim.plotting import log_steps

from .common import MU, arrays, records_of, save, sweep_mapping, write_numbers

BASE = {"log_scale": "log", "log_points": 80, "pop_log_points": 40, "clean_twin": False}
SAVED = ["pop_score_relevant", "twin_pop_score_relevant"]
# (title, keys, steps, quick steps: a bfloat16 step at d = 2000 takes about 12 ms)
SETTINGS = (
    ("d = 200, |mu| = 20, GD", {"d": 200}, 10**6, 10**4),
    ("d = 200, |mu| = 4.7, GD (late generalization)", {"d": 200, "signal_norm": 4.7}, 10**6, 10**4),
    ("d = 2000, |mu| = 10, GD (figure 5)", {"d": 2000, "signal_norm": 10.0}, 10**5, 400),
    ("d = 200, |mu| = 20, AdamW lr 0.001", {"d": 200, "optimizer": "adam", "lr": 0.001}, 10**5, 2000),
    (
        "d = 200, |mu| = 20, AdamW, Trainer defaults",
        {"d": 200, "optimizer": "adam", "lr": 5e-5, "weight_decay": 0.0},
        10**5,
        2000,
    ),
)
STABLE = tuple(
    (
        title.replace("GD", "StableMax, GD").replace("AdamW", "StableMax, AdamW"),
        {**keys, "attention": "stablemax"},
        steps,
        quick,
    )
    for title, keys, steps, quick in SETTINGS
    if keys["d"] == 200
)
FORMATS = ("float32", "bfloat16")
# the finite-horizon critical signal: GD at d = 200 over these |mu| for SWEEP_STEPS steps
SWEEP_NORMS = (3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 7.0, 8.0, 10.0)
SWEEP_STEPS = 3 * 10**5


def _setting_points(quick: bool) -> list[dict]:
    """Per setting (SETTINGS + STABLE, in order) and format, its point."""
    return [
        {**keys, "steps": quick_steps if quick else steps, "precision_twin": fmt}
        for _, keys, steps, quick_steps in SETTINGS + STABLE
        for fmt in FORMATS
    ]


def _sweep_points(quick: bool) -> list[dict]:
    """Per |mu| of the critical-signal sweep and format, its point."""
    norms = SWEEP_NORMS[::4] if quick else SWEEP_NORMS
    steps = 10**4 if quick else SWEEP_STEPS
    return [
        {"d": 200, "steps": steps, "signal_norm": mu, "precision_twin": fmt}
        for mu in norms
        for fmt in FORMATS
    ]


def sweeps(quick: bool) -> list[dict]:
    """Every run of the figure as one sweep (each with its exact run beside its twin)."""
    points = _setting_points(quick) + _sweep_points(quick)
    return [sweep_mapping("fig17_precision", BASE, {}, [0], SAVED, points=points)]


def records(quick: bool, cache: Path) -> dict:
    """The figure's records by their points (:func:`_point_key`)."""
    recs = records_of(cache, *sweeps(quick))
    return {_point_key(r["config"]): r for r in recs}


def _point_key(c: dict) -> tuple:
    keys = ("d", "signal_norm", "optimizer", "lr", "weight_decay", "attention", "steps", "precision_twin")
    return tuple(c[k] for k in keys)


def runs(quick: bool, by: dict) -> list[tuple[str, dict]]:
    """Per setting, its float32 and bfloat16 runs' records (each with the same exact run beside it),
    from the records ``by`` their points (:func:`records`)."""
    out = []
    for title, keys, steps, quick_steps in SETTINGS + STABLE:
        cfg = as_config({**BASE, **keys, "steps": quick_steps if quick else steps}).to_dict()
        out.append((title, {fmt: by[_point_key({**cfg, "precision_twin": fmt})] for fmt in FORMATS}))
    return out


def sweep(quick: bool, by: dict) -> list[tuple[float, dict]]:
    """Per |mu| of the critical-signal sweep, its float32 and bfloat16 runs' records."""
    out = []
    for p in _sweep_points(quick)[:: len(FORMATS)]:
        cfg = as_config({**BASE, **p}).to_dict()
        out.append(
            (p["signal_norm"], {fmt: by[_point_key({**cfg, "precision_twin": fmt})] for fmt in FORMATS})
        )
    return out


def critical(points: list[tuple[float, float | None]]) -> str:
    """The bracket of the smallest |mu| from which every larger one generalizes (t not None)."""
    ok = [t is not None for _, t in points]
    if all(ok):
        return f"|mu| <= {points[0][0]:g}"
    if not ok[-1]:
        return f"|mu| > {points[-1][0]:g}"
    last_bad = max(i for i, good in enumerate(ok) if not good)
    return f"{points[last_bad][0]:g} < |mu| <= {points[last_bad + 1][0]:g}"


def draw_sweep(ax, res: list[tuple[float, dict]], horizon: int) -> list[str]:
    """t_select against |mu| in the three precisions; the critical bracket of each."""
    lines = [
        f"critical signal at a finite horizon: GD, d = 200, {horizon:g} steps (t: the first of the "
        "40 log-spaced population log points from which the relevant score stays >= 0.5)"
    ]
    series = {"float64": [(mu, r["float32"]["final"].get("t_select")) for mu, r in res]}
    for fmt in FORMATS:
        series[fmt] = [(mu, r[fmt]["precision"].get("t_select")) for mu, r in res]
    for (name, pts), color, mark in zip(series.items(), ("k", "C0", "C3"), ("o", "s", "^")):
        got = [(mu, t) for mu, t in pts if t is not None]
        if got:
            ax.plot(*zip(*got), marker=mark, color=color, ls="-" if name == "float64" else "--", label=name)
        text = ", ".join(f"{mu:g}: {'never' if t is None else format(t, '.3g')}" for mu, t in pts)
        lines.append(f"  {name}: critical {critical(pts)}; t_select by |mu|: {text}")
    ax.axhline(horizon, color="0.6", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel(MU)
    ax.set_ylabel("step the relevant score reaches 0.5")
    ax.set_title(f"softmax, GD, d = 200: relevant token selected within {horizon:g} steps", fontsize=9)
    ax.legend(fontsize=7)
    return lines


def _describe(name: str, final: dict, t_gen, extra: str = "") -> str:
    err = format_error(final.get("pop_error"), final.get("pop_error_se"), final.get("pop_error_resolved"))
    gen = "never" if t_gen is None else f"from step {t_gen:g}"
    head = f"{name}: regime {final.get('regime')}, population error {err}"
    return f"{head}, relevant score >= 0.5 {gen}{extra}"


def draw(ax, title: str, res: dict) -> list[str]:
    """One setting's panel; its numbers."""
    exact = res["float32"]
    tr = arrays(exact["trajectory"])
    x = log_steps(tr["step"])
    m = np.isfinite(tr["pop_score_relevant"])
    ax.plot(x[m], tr["pop_score_relevant"][m], color="k", lw=2, label=f"float64 ({exact['final']['regime']})")
    lines = [title, "  " + _describe("float64", exact["final"], exact["final"].get("t_select"))]
    for fmt, color in zip(FORMATS, ("C0", "C3")):
        r = res[fmt]
        pr, t = r["precision"], arrays(r["trajectory"])
        if pr.get("status") == "failed":  # diverged: no trajectory of its own, the reason instead
            ax.plot([], [], color=color, ls="--", label=f"{fmt} (failed)")
            lines.append(f"  {fmt}: {pr['reason']}")
            continue
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
        lines.append("  " + _describe(fmt, pr, pr.get("t_select"), extra))
    ax.axhline(0.5, color="0.6", lw=0.8)
    ax.set_xscale("log")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("step")
    ax.set_ylabel("fresh-sample relevant score")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return lines


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    by = records(quick, cache)
    res = runs(quick, by)
    panels = len(SETTINGS) + len(STABLE) + 1  # every setting, its StableMax twin where it has one, the sweep
    cols = 3
    rows = -(-panels // cols)
    fig, grid = plt.subplots(rows, cols, figsize=(13, 3.4 * rows), layout="constrained")
    cells = list(grid.ravel())
    for ax in cells[panels:]:
        ax.axis("off")
    letters = "abcdefghijklmnopqrstuvwxyz"
    lines = [
        "float64 (the exact run), float32 and bfloat16 (precision twins as torch computes on CPU, matrix "
        "products summed in NumPy's BLAS order: bfloat16 parts from torch's loop by one unit in a few "
        "entries, docs/precision.md); dotted: the first step a score rounds to 1; x: the bfloat16 twin "
        "stops moving"
    ]
    for k, (ax, (title, r)) in enumerate(zip(cells, res)):
        lines += draw(ax, f"({letters[k]}) {title}", r)
    lines += draw_sweep(cells[panels - 1], sweep(quick, by), 10**4 if quick else SWEEP_STEPS)
    cells[panels - 1].set_title(f"({letters[panels - 1]}) " + cells[panels - 1].get_title(), fontsize=9)
    return [save(fig, outdir / "fig17_precision.png"), write_numbers(outdir, "fig17_precision", lines)]
