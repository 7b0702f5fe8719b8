"""Figure 19: positional and semantic attention (Cui, Behrens, Krzakala and Zdeborová, NeurIPS
2024) at omega = 0.3, sigma = 0.5, lambda = 0.01, d = 1000: the generalization error, theta =
|Q*'Q|/d and the magnetization |1'Q|/d against alpha = n/d, from the semantic (Q(0) = Q*) and the
positional (Q(0) = 1/sqrt(d)) initialization. attnsim's means +- sd over seeds beside the published
means +- sd over their 24 runs (every other alpha of their grid) and their replica solutions
(semantic, positional and agnostic branches, converted to the empirical units). The numbers file
gives each row's z-score per metric: the difference of means over both standard errors combined."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnsim.models.positional_semantic.published_data import gd_table, theory

from .common import records_of, save, sweep_mapping, write_numbers

OMEGA = 0.3
GRID = np.linspace(0.01, 2, 25)  # the published alphas
INITS = {"semantic": "C0", "positional": "C3"}
PANELS = {
    "gen_error": r"generalization error $\|\hat Y - Y\|^2 / (2d)$",
    "theta": r"$\theta = |Q^{*\top} Q| / d$",
    "magnetization": r"magnetization $|\mathbf{1}^\top Q| / d$",
}
BRANCH_STYLE = {"semantic": "-", "positional": "--", "agnostic": ":"}


def sweeps(quick: bool) -> list[dict]:
    alphas = [float(a) for a in (GRID[[6, 12, 18, 24]] if quick else GRID[2::2])]
    base = {
        "model": "positional_semantic",
        "d": 100 if quick else 1000,
        "omega": OMEGA,
        "log_every": 500,
        "test_n": 500 if quick else 2000,
    }
    grid = {"alpha": alphas, "init": list(INITS)}
    return [sweep_mapping("fig19_positional_semantic", base, grid, [0] if quick else [0, 1, 2])]


def rows(recs: list[dict]) -> dict[tuple[str, float], list[dict]]:
    out: dict = {}
    for r in recs:
        out.setdefault((r["config"]["init"], r["config"]["alpha"]), []).append(r["final"])
    return dict(sorted(out.items()))


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    recs = records_of(cache, *sweeps(quick))
    by_row = rows(recs)
    pub = gd_table()
    d = recs[0]["config"]["d"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), layout="constrained")
    for ax, (metric, label) in zip(axes, PANELS.items()):
        for branch, ls in BRANCH_STYLE.items():
            th = theory(OMEGA, branch)
            if th:
                ax.plot(th["alpha"], th[metric], ls, color="0.35", lw=1, label=f"replica theory, {branch}")
        for init, color in INITS.items():
            keys = [k for k in by_row if k[0] == init]
            a = np.array([k[1] for k in keys])
            vals = [np.array([f[metric] for f in by_row[k]]) for k in keys]
            mean = np.array([v.mean() for v in vals])
            sd = np.array([v.std(ddof=1) if v.size > 1 else 0.0 for v in vals])
            ax.errorbar(
                a, mean, sd, fmt="o", color=color, ms=4, capsize=2, label=f"attnsim, {init} init (d = {d})"
            )
            ref = [pub.get((init, round(x, 6), OMEGA), {}).get(metric) for x in a]
            ok = [i for i, v in enumerate(ref) if v is not None]
            ax.errorbar(
                a[ok] + 0.012,
                [ref[i][0] for i in ok],
                [ref[i][1] for i in ok],
                fmt="s",
                mfc="none",
                color=color,
                ms=5,
                capsize=2,
                label=f"Cui et al., {init} init (d = 1000, 24 runs)",
            )
        ax.set_xlabel(r"$\alpha = n / d$")
        ax.set_title(label)
        ax.grid(lw=0.3)
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=7)
    norm = np.mean([r["final"]["teacher_norm"] for r in recs if r["config"]["init"] == "semantic"])
    seeds = sorted({r["config"]["seed"] for r in recs})
    fig.suptitle(
        rf"positional and semantic attention: $\omega$ = {OMEGA}, $\sigma$ = 0.5, $\lambda$ = 0.01, "
        f"GD lr 0.15, 5000 steps\nattnsim: means $\\pm$ sd over seeds {seeds[0]}-{seeds[-1]}, whose teachers "
        f"have $\\|Q^*\\|^2/d$ = {norm:.3f} on average (its mean over draws: 1 $\\pm$ "
        f"{math.sqrt(2 / d / len(seeds)):.3f}): "
        r"$\theta$ and the errors follow it (docs/positional-semantic.md)",
        fontsize=10,
    )
    return [
        save(fig, outdir / "fig19_positional_semantic.png"),
        write_numbers(outdir, "fig19_positional_semantic", numbers(by_row, pub)),
    ]


def numbers(by_row: dict, pub: dict) -> list[str]:
    """Every row's means and z-scores (attnsim - published over both standard errors combined)."""
    lines = []
    worst = 0.0
    for (init, alpha), finals in by_row.items():
        ref = pub.get((init, round(alpha, 6), OMEGA))
        norm = np.mean([f["teacher_norm"] for f in finals])
        parts = []
        for metric in ("gen_error", "theta", "magnetization", "train_objective", "linear_gen_error"):
            v = np.array([f[metric] for f in finals])
            sd = v.std(ddof=1) if v.size > 1 else float("nan")
            text = f"{metric} {v.mean():.4g} +- {sd:.2g}"
            if ref is not None and v.size > 1:
                pm, ps = ref[metric]
                z = (v.mean() - pm) / math.sqrt(sd**2 / v.size + ps**2 / 24)
                worst = max(worst, abs(z))
                text += f" (published {pm:.4g} +- {ps:.2g}, z {z:+.2f})"
            parts.append(text)
        lines.append(
            f"{init} alpha {alpha:.4f}, {len(finals)} seeds, |Q*|^2/d {norm:.3f}: " + "; ".join(parts)
        )
    norm = np.mean([f["teacher_norm"] for finals in by_row.values() for f in finals])
    lines.append(
        f"the seeds' teachers: |Q*|^2/d = {norm:.4f} on average over the seeds (a chi-square over d: mean 1, "
        "sd sqrt(2/d) per seed); theta, the linear baseline and the objective follow it, so a block of "
        "short teachers shifts every row's z the same way (benchmarks/bench_cui2024_parity.py removes "
        "it with a control variate)"
    )
    lines.append(
        f"largest |z| {worst:.2f}; a z-score is (mean - published mean) / sqrt(sd^2/N + sd_pub^2/24), "
        "N seeds; "
        "the teacher's |Q*|^2/d (chi-square over d, mean 1) moves theta and the linear baseline together "
        "across the rows of one seed"
    )
    return lines
