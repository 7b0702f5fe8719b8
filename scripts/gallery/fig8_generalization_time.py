"""Figure 8: when generalization arrives. Memorization and generalization
times (the fresh relevant score reaching gen_score = 1/2 for good) against the
signal strength at d = 1000, 2000, 4000, by gradient flow to 10^14 steps, 3
seeds, beside what the max-margin limit says of each run: its hard-attention
error and relevant probability p_lim (exact quadrature). A run whose p_lim is
below gen_score can never generalize (gen_never), however long it trains;
this is per run. The "critical" |mu| where the seeds' mean p_lim crosses
gen_score moves with gen_score (a convention, not a transition): it is
reported for gen_score 0.3, 0.5 and 0.7. Three laws of t_select are
fitted and compared (rms in decades): a power law in p_lim - 1/2, an
essential singularity log t ~ 1/(p_lim - 1/2), and log t linear in 1/SNR^2;
only a law that wins at every d is claimed."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from .common import MU, SNR, records_of, save, sweep_mapping, write_numbers

DIMS = (1000, 2000, 4000)
SNRS = [round(v, 3) for v in np.linspace(0.1, 0.34, 13)]  # |mu| = SNR sqrt(d)
HORIZON = 10**14
SAVE = ["pop_error", "pop_error_se", "pop_error_resolved", "pop_score_relevant", "mm_cos", "train_loss"]


def _dims(quick: bool) -> tuple[int, ...]:
    return (1000, 2000) if quick else DIMS


def sweeps(quick: bool) -> list[dict]:
    """One sweep per d."""
    dims = _dims(quick)
    snrs = SNRS[::3] if quick else SNRS
    seeds = [0] if quick else [0, 1, 2]
    base = {
        "integrator": "flow",
        "steps": 10**9 if quick else HORIZON,
        "log_scale": "log",
        "log_points": 60,
        "pop_log_points": 60,
        "limit": True,
        "engine": "reduced",
        "clean_twin": False,
    }
    return [
        sweep_mapping(
            f"fig8_gen_time_{d}",
            {**base, "d": d},
            {"signal_norm": [round(s * math.sqrt(d), 3) for s in snrs]},
            seeds,
            SAVE,
        )
        for d in dims
    ]


def records(quick: bool, cache: Path) -> dict[int, list[dict]]:
    return {d: records_of(cache, m) for d, m in zip(_dims(quick), sweeps(quick))}


def critical_norm(recs: list[dict], level: float = 0.5) -> float | None:
    """The |mu| where the seed-mean hard-limit relevant probability crosses
    ``level`` (linear interpolation): a convention, it moves with the level."""
    mus = sorted({r["config"]["signal_norm"] for r in recs})
    prob = [
        np.mean([r["limit"]["relevant_prob"] for r in recs if r["config"]["signal_norm"] == m]) for m in mus
    ]
    for (m0, p0), (m1, p1) in zip(zip(mus, prob), zip(mus[1:], prob[1:])):
        if p0 < level <= p1:
            return m0 + (level - p0) * (m1 - m0) / (p1 - p0)
    return None


# each law: log10 t = a + b * x(run); x from the run's limit probability or its SNR
LAWS = {
    "power law in p_lim - 1/2": lambda r: -math.log10(r["limit"]["relevant_prob"] - 0.5),
    "essential singularity log t ~ 1/(p_lim - 1/2)": lambda r: 1.0 / (r["limit"]["relevant_prob"] - 0.5),
    "log t linear in 1/SNR^2": lambda r: 1.0 / r["theory"]["snr"] ** 2,
}


def fit_laws(recs: list[dict]) -> dict[str, dict]:
    """Least-squares fits of log10 t_select for each law over the runs that
    generalize within the horizon (and have p_lim > 1/2): slope, intercept, rms."""
    runs = [r for r in recs if r["final"]["t_select"] is not None and r["limit"]["relevant_prob"] > 0.5]
    if len(runs) < 3:
        return {}
    y = np.log10([r["final"]["t_select"] for r in runs])
    out = {}
    for name, var in LAWS.items():
        x = np.array([var(r) for r in runs])
        b, a = np.polyfit(x, y, 1)
        out[name] = {
            "a": float(a),
            "b": float(b),
            "rms": float(np.sqrt(np.mean((a + b * x - y) ** 2))),
            "points": len(runs),
        }
    return out


def per_seed(recs: list[dict]) -> list[str]:
    """Per |mu|: each seed's p_lim, whether it can never generalize, and when it did."""
    lines = []
    for m in sorted({r["config"]["signal_norm"] for r in recs}):
        runs = sorted((r for r in recs if r["config"]["signal_norm"] == m), key=lambda r: r["config"]["seed"])
        cells = []
        for r in runs:
            t = r["final"]["t_select"]
            what = "gen_never" if r["limit"].get("gen_never") else f"selected at {t:.3g}" if t else "not yet"
            cells.append(
                f"seed {r['config']['seed']}: p_lim {r['limit']['relevant_prob']:.3f}, "
                f"limit error {r['limit']['pop_error']:.3g}, {what}"
            )
        lines.append(f"  |mu| = {m:g}: " + "; ".join(cells))
    return lines


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    data = records(quick, cache)
    fig, grid = plt.subplots(2, 2, figsize=(12, 9), layout="constrained")
    axes = grid.ravel()
    lines = []
    wins: dict[str, int] = {}
    for i, (d, recs) in enumerate(data.items()):
        color = f"C{i}"
        mus = np.array(sorted({r["config"]["signal_norm"] for r in recs}))
        for key, marker, ls in (("t_select", "o", "-"), ("t_memorize", "s", ":")):
            per = [[r["final"][key] for r in recs if r["config"]["signal_norm"] == m] for m in mus]
            mean = [
                np.exp(np.mean(np.log([t for t in v if t is not None])))
                if all(t is not None for t in v)
                else np.nan
                for v in per
            ]
            for m, v in zip(mus, per):
                ts = [t for t in v if t is not None]
                axes[0].plot([m] * len(ts), ts, marker, color=color, ms=3, alpha=0.5)
            label = f"d={d}: {'relevant token selected' if key == 't_select' else 'memorized'}"
            axes[0].plot(mus, mean, ls, color=color, label=label)
        snr = np.array([r["theory"]["snr"] for r in recs])
        axes[1].plot(snr, [r["limit"]["pop_error"] for r in recs], "o", color=color, ms=3, label=f"d={d}")
        crit = {lv: critical_norm(recs, lv) for lv in (0.3, 0.5, 0.7)}
        lines.append(
            f"d={d}: |mu| where the seeds' mean p_lim crosses 0.3 / 0.5 / 0.7: "
            + " / ".join("none" if v is None else f"{v:.2f}" for v in crit.values())
            + " (a convention: it moves with gen_score)"
        )
        lines += per_seed(recs)
        fits = fit_laws(recs)
        if fits:
            best = min(fits, key=lambda k: fits[k]["rms"])
            wins[best] = wins.get(best, 0) + 1
            rms = "; ".join(f"{k} {v['rms']:.3f}" for k, v in fits.items())
            lines.append(
                f"d={d}: fits of log10 t_select over {fits[best]['points']} runs, "
                f"rms in decades: {rms} (best: {best})"
            )
            runs = [
                r for r in recs if r["final"]["t_select"] is not None and r["limit"]["relevant_prob"] > 0.5
            ]
            gap = np.array([r["limit"]["relevant_prob"] - 0.5 for r in runs])
            t = np.array([r["final"]["t_select"] for r in runs])
            axes[2].plot(gap, t, "o", color=color, ms=3)
            g = np.logspace(np.log10(gap.min()), np.log10(gap.max()), 50)
            for name, ls in (
                ("power law in p_lim - 1/2", "--"),
                ("essential singularity log t ~ 1/(p_lim - 1/2)", ":"),
            ):
                f = fits[name]
                x = -np.log10(g) if name.startswith("power") else 1.0 / g
                axes[2].plot(g, 10 ** (f["a"] + f["b"] * x), ls, color=color, lw=0.8)
            inv = np.array([1.0 / r["theory"]["snr"] ** 2 for r in runs])
            axes[3].plot(inv, t, "o", color=color, ms=3)
            f = fits["log t linear in 1/SNR^2"]
            xs = np.linspace(inv.min(), inv.max(), 50)
            axes[3].plot(xs, 10 ** (f["a"] + f["b"] * xs), "--", color=color, lw=0.8)
    if wins:
        every = [k for k, v in wins.items() if v == len(data)]
        lines.append(
            "law: " + (f"{every[0]} wins at every d" if every else "no law wins at every d: none is claimed")
        )
    axes[0].set_xlabel(MU)
    axes[0].set_title("(a) memorization (squares) and selection on new samples (dots), per seed", fontsize=10)
    axes[1].set_xlabel(SNR)
    axes[1].set_title("(b) the max-margin limit's population error, per run", fontsize=10)
    axes[2].set_xlabel(r"$p_{\lim} - 1/2$ (hard-attention relevant probability)")
    axes[2].set_xscale("log")
    axes[2].set_title("(c) t_select: power law (dashed), essential singularity (dotted)", fontsize=10)
    axes[3].set_xlabel(r"$1/\mathrm{SNR}^2 = d/\|\mu\|^2$")
    axes[3].set_title(r"(d) t_select: $\log t$ linear in $1/\mathrm{SNR}^2$ (dashed)", fontsize=10)
    for ax in axes:
        ax.set_yscale("log")
    for ax in (axes[0], axes[2], axes[3]):
        ax.set_ylabel("step")
    axes[1].set_ylabel("limit error")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    return [
        save(fig, outdir / "fig8_generalization_time.png"),
        write_numbers(outdir, "fig8_generalization_time", lines),
    ]
