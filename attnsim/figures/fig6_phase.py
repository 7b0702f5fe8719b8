"""Figure 6: phase diagram over the number of samples n and the signal
strength (SNR = |mu| / sqrt(d) at d = 2000), 3 seeds: the fraction of runs in
each regime after 1000 and after 5000 steps (one run, two readings)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ..metrics import regime
from .common import save, sweep_records, write_numbers

SAVE = ["n_fitted_clean", "n_fitted_noisy", "pop_error"]
READINGS = (1000, 5000)
SHOWN = ("not_overfitting", "partial", "benign", "harmful")


def records(quick: bool, cache: Path) -> list[dict]:
    if quick:
        grid = {"n": [10, 20], "signal_norm": [5.0, 20.0, 60.0]}
        seeds = [0]
    else:
        grid = {"n": [10, 20, 40, 80], "signal_norm": [float(v) for v in np.geomspace(4, 80, 12).round(2)]}
        seeds = [0, 1, 2]
    base = {"d": 2000, "steps": READINGS[-1], "log_every": 1000, "pop_log_points": 6, "engine": "reduced"}
    return sweep_records(cache, "fig6_phase", base, grid, seeds, SAVE)


def regime_at(rec: dict, step: int) -> str:
    tr, f = rec["trajectory"], rec["final"]
    j = list(tr["step"]).index(step)
    err = np.nan if tr["pop_error"][j] is None else tr["pop_error"][j]
    return regime(f["n_clean"], tr["n_fitted_clean"][j], f["n_noisy"], tr["n_fitted_noisy"][j], err,
                  rec["config"]["benign_error"])  # fmt: skip


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    recs = records(quick, cache)
    ns = sorted({r["config"]["n"] for r in recs})
    mus = sorted({r["config"]["signal_norm"] for r in recs})
    fig, axes = plt.subplots(len(READINGS), len(SHOWN), figsize=(15, 6), sharex=True, sharey=True)
    for row, step in enumerate(READINGS):
        counts = {name: np.zeros((len(ns), len(mus))) for name in SHOWN}
        total = np.zeros((len(ns), len(mus)))
        for r in recs:
            i, j = ns.index(r["config"]["n"]), mus.index(r["config"]["signal_norm"])
            name = regime_at(r, step)
            total[i, j] += 1
            if name in counts:
                counts[name][i, j] += 1
        for col, name in enumerate(SHOWN):
            ax = axes[row, col]
            frac = counts[name] / np.maximum(total, 1)
            im = ax.imshow(frac, origin="lower", aspect="auto", vmin=0, vmax=1, cmap="magma")
            snr = np.array(mus) / np.sqrt(2000)
            ticks = np.arange(0, len(mus), max(1, len(mus) // 6))
            ax.set_xticks(ticks, [f"{snr[t]:.2g}" for t in ticks])
            ax.set_yticks(range(len(ns)), [str(n) for n in ns])
            ax.set_title(f"{name} after {step} steps", fontsize=9)
            if row == len(READINGS) - 1:
                ax.set_xlabel("SNR = |mu| / sqrt(d)")
            if col == 0:
                ax.set_ylabel("n")
    fig.colorbar(im, ax=axes, label="fraction of runs", shrink=0.8)
    lines = []
    for step in READINGS:
        for n in ns:
            names = [regime_at(r, step) for r in recs if r["config"]["n"] == n]
            frac = ", ".join(f"{k} {names.count(k) / len(names):.2f}" for k in SHOWN if names.count(k))
            lines.append(f"after {step} steps, n = {n}: {frac}")
        harm = [r["config"]["signal_norm"] for r in recs if regime_at(r, step) == "harmful"]
        lines.append(f"after {step} steps: harmful runs at |mu| <= {max(harm) if harm else 'none'}")
    return [save(fig, outdir / "fig6_phase.png"), write_numbers(outdir, "fig6_phase", lines)]
