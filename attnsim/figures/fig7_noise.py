"""Figure 7: label-noise sweep. Training accuracy on noisy samples (the
memorized fraction), overall training accuracy and population error against
the noise rate in the three settings of figure 2; 5 seeds, mean and min-max band.
Noise is flipped with ``label_noise = exact`` (round(n eta) samples) so that
every rate on the grid flips what it says."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from .common import save, sweep_records, write_numbers
from .fig2_dynamics import SETTINGS


def records(quick: bool, cache: Path) -> dict[str, list[dict]]:
    etas = [0.0, 0.2, 0.4] if quick else [round(0.05 * i, 2) for i in range(11)]
    seeds = [0, 1] if quick else list(range(5))
    base = {"steps": 300 if quick else 1000, "log_every": 1000, "pop_log_points": 2, "label_noise": "exact"}
    return {
        label: sweep_records(cache, f"fig7_noise_{i}", {**base, **over}, {"noise_rate": etas}, seeds)
        for i, (label, over) in enumerate(SETTINGS.items())
    }


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    data = records(quick, cache)
    keys = (("train_acc_noisy", "noisy samples fitted (memorized)"), ("train_acc", "training accuracy"),
            ("pop_error", "population (test) error"))  # fmt: skip
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, (key, title) in zip(axes, keys):
        for i, (label, recs) in enumerate(data.items()):
            etas = sorted({r["config"]["noise_rate"] for r in recs})
            vals = [[r["final"][key] for r in recs if r["config"]["noise_rate"] == e] for e in etas]
            vals = [np.array([np.nan if v is None else v for v in vs], dtype=float) for vs in vals]
            if key == "pop_error":  # benign errors reach 1e-21 and below
                vals = [np.maximum(v, 1e-30) for v in vals]
            mean = np.array([np.nanmean(v) if np.isfinite(v).any() else np.nan for v in vals])
            lo = np.array([np.nanmin(v) if np.isfinite(v).any() else np.nan for v in vals])
            hi = np.array([np.nanmax(v) if np.isfinite(v).any() else np.nan for v in vals])
            ax.plot(etas, mean, "o-", color=f"C{i}", label=label, ms=3)
            ax.fill_between(etas, lo, hi, color=f"C{i}", alpha=0.2)
        ax.set_xlabel("label noise rate eta")
        ax.set_title(title, fontsize=10)
    axes[2].set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    lines = []
    for label, recs in data.items():
        for e in sorted({r["config"]["noise_rate"] for r in recs}):
            fs = [r["final"] for r in recs if r["config"]["noise_rate"] == e]
            err = [f["pop_error"] for f in fs]
            fitted = [f["n_fitted_noisy"] / f["n_noisy"] for f in fs if f["n_noisy"]]
            regimes = ", ".join(sorted({f["regime"] for f in fs}))
            lines.append(
                f"{label}, eta {e:g}: noisy fitted {np.mean(fitted) if fitted else float('nan'):.2f}, "
                f"population error mean {np.mean(err):.2g} (max {max(err):.2g}), regimes {regimes}"
            )
    return [save(fig, outdir / "fig7_noise.png"), write_numbers(outdir, "fig7_noise", lines)]
