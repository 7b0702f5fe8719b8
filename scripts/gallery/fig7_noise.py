"""Figure 7: label-noise sweep. Training accuracy on noisy samples (the
memorized fraction), overall training accuracy, the population error (beside
the Bayes error, dotted) and the cost of label noise (error over each run's
clean-label twin) against the noise rate in the three settings of figure 2;
5 seeds, mean and min-max band (errors the estimator could not resolve are
upper bounds: open markers). The numbers file gives the regimes, decided
against the Bayes error (SPEC §3).
Noise is flipped with ``label_noise = exact`` (round(n eta) samples) so that
every rate on the grid flips what it says."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from .common import records_of, save, sweep_mapping, write_numbers
from .fig2_dynamics import SETTINGS


def sweeps(quick: bool) -> list[dict]:
    """One sweep per setting of figure 2, in its order."""
    etas = [0.0, 0.2, 0.4] if quick else [round(0.05 * i, 2) for i in range(11)]
    seeds = [0, 1] if quick else list(range(5))
    base = {"steps": 300 if quick else 1000, "log_every": 1000, "pop_log_points": 2, "label_noise": "exact"}
    return [
        sweep_mapping(f"fig7_noise_{i}", {**base, **over}, {"noise_rate": etas}, seeds)
        for i, over in enumerate(SETTINGS.values())
    ]


def records(quick: bool, cache: Path) -> dict[str, list[dict]]:
    return {label: records_of(cache, m) for label, m in zip(SETTINGS, sweeps(quick))}


def _band(vals):
    mean = np.array([np.nanmean(v) if np.isfinite(v).any() else np.nan for v in vals])
    lo = np.array([np.nanmin(v) if np.isfinite(v).any() else np.nan for v in vals])
    hi = np.array([np.nanmax(v) if np.isfinite(v).any() else np.nan for v in vals])
    return mean, lo, hi


ERROR_FLOOR = 1e-16  # errors below float64's resolution of 1 are drawn on this floor, marked


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    data = records(quick, cache)
    keys = (
        ("train_acc_noisy", "noisy samples fitted (memorized)"),
        ("train_acc", "training accuracy"),
        ("pop_error", "population (test) error"),
        ("label_noise_cost", "cost of label noise: error - clean-label twin's"),
    )
    fig, grid = plt.subplots(2, 2, figsize=(11, 7.6))
    axes = grid.ravel()
    for ax, (key, title) in zip(axes, keys):
        for i, (label, recs) in enumerate(data.items()):
            etas = sorted({r["config"]["noise_rate"] for r in recs})
            cells = [[r["final"] for r in recs if r["config"]["noise_rate"] == e] for e in etas]
            vals = [
                np.array([np.nan if f.get(key) is None else f[key] for f in fs], dtype=float) for fs in cells
            ]
            low = None
            if key in ("pop_error", "label_noise_cost"):  # log axes from ERROR_FLOOR to 1
                low = np.array([bool(np.any(v[np.isfinite(v)] < ERROR_FLOOR)) for v in vals])
                vals = [np.clip(v, ERROR_FLOOR, None) for v in vals]
            mean, lo, hi = _band(vals)
            ax.plot(etas, mean, "o-", color=f"C{i}", label=label, ms=3)
            ax.fill_between(etas, lo, hi, color=f"C{i}", alpha=0.2)
            if low is not None and low.any():  # a seed below the floor: drawn on it, marked
                ax.plot(np.array(etas)[low], np.full(low.sum(), ERROR_FLOOR), "v", color=f"C{i}", ms=6)
            if key == "pop_error":
                bound = [any(f["pop_error_resolved"] == 0.0 for f in fs) for fs in cells]
                ax.plot(np.array(etas)[bound], mean[bound], "o", mfc="w", color=f"C{i}", ms=6)
                bayes = recs[0]["final"]["bayes_error"]
                if bayes > ERROR_FLOOR:  # the floor, where the plot can show it
                    ax.axhline(bayes, color=f"C{i}", ls=":", lw=1)
        ax.set_xlabel(r"label noise rate $\eta$")
        ax.set_title(title, fontsize=11)
    for ax in axes[2:]:
        ax.set_yscale("log")
        ax.set_ylim(ERROR_FLOOR / 5, 1.5)
        ax.set_ylabel(r"$\blacktriangledown$: a seed below $10^{-16}$, drawn there", fontsize=9)
    axes[0].legend(fontsize=9)
    fig.tight_layout()
    lines = []
    for label, recs in data.items():
        for e in sorted({r["config"]["noise_rate"] for r in recs}):
            fs = [r["final"] for r in recs if r["config"]["noise_rate"] == e]
            err = [f["pop_error"] for f in fs]
            fitted = [f["n_fitted_noisy"] / f["n_noisy"] for f in fs if f["n_noisy"]]
            regimes = ", ".join(sorted({f["regime"] for f in fs}))
            unresolved = sum(f["pop_error_resolved"] == 0.0 for f in fs)
            excess = [f["label_noise_cost"] for f in fs if f["label_noise_cost"] is not None]
            twin = [f["error_clean_twin"] for f in fs if f["error_clean_twin"] is not None]
            bounds = sum(f.get("label_noise_cost_resolved") == 0.0 for f in fs)
            memorized = f"{np.mean(fitted):.2f}" if fitted else "n/a (no noisy labels)"
            line = (
                f"{label}, eta {e:g}: noisy fitted {memorized}, "
                f"population error mean {np.mean(err):.2g} (max {max(err):.2g}"
                f"{f'; {unresolved} of {len(fs)} upper bounds' if unresolved else ''}), "
            )
            if excess:
                line += (
                    f"clean-label twin {np.mean(twin):.2g}, cost of label noise mean {np.mean(excess):.2g} "
                )
                line += f"(max {max(excess):.2g}{f'; {bounds} upper bounds' if bounds else ''}), "
            lines.append(line + f"Bayes error {fs[0]['bayes_error']:.2g}, regimes {regimes}")
    return [save(fig, outdir / "fig7_noise.png"), write_numbers(outdir, "fig7_noise", lines)]
