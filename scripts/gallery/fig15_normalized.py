"""Figure 15: normalized GD reaches the max-margin direction in reachable time
(Tarzanagh et al. 2023; Vasudeva et al. 2025), here with label noise. p is
trained with W = I at d = 200 (20% flipped labels, the paper's tokens):
cos(q, q_mm) to the p-SVM direction of the final selection against steps,
for normalized GD at three step sizes (10^4 steps) and for plain GD by its
gradient flow to 10^15 steps, with
the step at which each first reaches cos = 0.999 (exact: every normalized
step is logged; the flow's is a log point). Plain GD's 1 - cos falls
like 1/|p|^2 while |p| grows like log t; the figure extrapolates that fit
to where 0.999 would be reached."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnsim.plotting import log_steps

from .common import arrays, records_of, save, sweep_mapping, write_numbers

BASE = {
    "train": "p",
    "init_W": "identity",
    "d": 200,
    "limit": True,
    "log_scale": "log",
    "pop_log_points": 2,
    "clean_twin": False,  # no number of the figure is the clean-label twin's
}
TARGET = 0.999
LRS = (0.01, 0.05, 0.2)
FLOW_STEPS = 10**15


def sweeps(quick: bool) -> list[dict]:
    """The normalized-GD runs (one per step size) and plain GD's flow, as one sweep."""
    points = []
    for lr in LRS[1:2] if quick else LRS:
        steps = 2000 if quick else 10**4
        # every step logged: the first step at the target is exact, not the first logged one
        # (quick: a log grid, and the numbers say "first at logged step")
        grid = {"log_points": 60} if quick else {"log_scale": "linear", "log_every": 1}
        points.append({"optimizer": "normalized", "lr": lr, "steps": steps, **grid})
    flow_steps = 10**9 if quick else FLOW_STEPS
    points.append({"integrator": "flow", "lr": 0.05, "steps": flow_steps, "log_points": 80})
    return [sweep_mapping("fig15_normalized", BASE, {}, [0], ["mm_cos", "p_norm"], points=points)]


def runs(quick: bool, cache: Path) -> dict:
    """The records by (optimizer, lr): ("normalized", lr) and ("gd", 0.05), the flow."""
    recs = records_of(cache, *sweeps(quick))
    return {
        (r["config"]["optimizer"], r["config"]["lr"]): {**r, "trajectory": arrays(r["trajectory"])}
        for r in recs
    }


def first_reach(tr: dict, target: float = TARGET) -> int | None:
    """The first logged step with cos >= target (None: never); exact for the
    normalized-GD runs, which log every step."""
    hit = np.flatnonzero(np.asarray(tr["mm_cos"]) >= target)
    return int(tr["step"][hit[0]]) if hit.size else None


def gd_extrapolation(tr: dict, target: float = TARGET) -> tuple[float, float, float]:
    """Plain GD's late phase: fit 1 - cos = a / |p|^2 and |p| = b + c log10 t over
    the last decades; the step where cos would reach ``target``, with a and c."""
    st, cos, pn = (np.asarray(tr[k], dtype=float) for k in ("step", "mm_cos", "p_norm"))
    late = st >= st[-1] / 1e5
    a = float(np.median((1.0 - cos[late]) * pn[late] ** 2))
    c, b = np.polyfit(np.log10(st[late]), pn[late], 1)
    need = math.sqrt(a / (1.0 - target))
    return 10.0 ** ((need - b) / c), a, float(c)


def draw(ax, res: dict) -> list[str]:
    """cos(q, q_mm) against steps with each run's first step at the target; the numbers."""
    lines = []
    for i, ((opt, lr), r) in enumerate(sorted(res.items())):
        tr = r["trajectory"]
        hit = first_reach(tr)
        label = f"normalized GD, lr={lr:g}" if opt == "normalized" else f"GD (gradient flow, lr={lr:g})"
        ax.plot(log_steps(tr["step"]), tr["mm_cos"], color=f"C{i}", label=label)
        if hit is not None:
            ax.plot([hit], [TARGET], "o", color=f"C{i}")
        every = len(tr["step"]) == int(tr["step"][-1]) + 1
        first = "first at step" if every else "first at logged step"
        where = f"{first} {hit}" if hit is not None else f"not by step {int(tr['step'][-1]):.3g}"
        lines.append(
            f"{label}: cos {tr['mm_cos'][-1]:.5f} at step {int(tr['step'][-1])} (|p| "
            f"{tr['p_norm'][-1]:.3g}); cos >= {TARGET} {where}; limit selection "
            f"{'feasible' if r['limit'].get('feasible') else 'infeasible'}; warnings: "
            f"{'; '.join(r['warnings']) or 'none'}"
        )
        if opt == "gd":
            t_need, a, c = gd_extrapolation(tr)
            lines.append(
                f"GD extrapolated: 1 - cos = {a:.3f} / |p|^2 and |p| grows {c:.3f} per decade of "
                f"steps, so cos >= {TARGET} near step {t_need:.1e}"
            )
    ax.axhline(TARGET, color="k", ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("steps")
    ax.set_ylabel(r"$\cos(q, q_{\mathrm{mm}})$")
    ax.set_ylim(0.8, 1.0005)
    ax.legend(fontsize=8, loc="lower right")
    return lines


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    res = runs(quick, cache)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), layout="constrained")
    lines = draw(axes[0], res)
    axes[0].set_title(r"$q = Wp$ against the $p$-SVM (train $p$, $W = I$, $d$ = 200, 20% flips)", fontsize=10)
    for i, ((opt, lr), r) in enumerate(sorted(res.items())):
        tr = r["trajectory"]
        axes[1].plot(
            log_steps(tr["step"]), 1.0 - np.asarray(tr["mm_cos"]), color=f"C{i}", label=f"{opt}, lr={lr:g}"
        )
    gd = res[("gd", 0.05)]["trajectory"]
    t_need, a, c = gd_extrapolation(gd)
    t_ext = np.geomspace(gd["step"][-1], max(t_need, gd["step"][-1]) * 10, 30)
    p_end = gd["p_norm"][-1] + c * np.log10(t_ext / gd["step"][-1])
    axes[1].plot(t_ext, a / p_end**2, "C0--", lw=1, label=f"GD extrapolated: 0.999 near {t_need:.0e}")
    axes[1].set_xscale("log")
    axes[1].set_yscale("log")
    axes[1].axhline(1 - TARGET, color="k", ls=":", lw=0.8)
    axes[1].set_xlabel("steps")
    axes[1].set_ylabel(r"$1 - \cos(q, q_{\mathrm{mm}})$")
    axes[1].legend(fontsize=8)
    axes[1].set_title("the same on a log scale", fontsize=10)
    lines.insert(
        0,
        "Tarzanagh et al. (2023): normalized GD converges to the max-margin direction, GD only "
        "logarithmically",
    )
    return [save(fig, outdir / "fig15_normalized.png"), write_numbers(outdir, "fig15_normalized", lines)]
