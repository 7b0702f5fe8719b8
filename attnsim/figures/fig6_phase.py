"""Figure 6: phase diagram over the number of samples n and the signal
strength (SNR = |mu| / sqrt(d) at d = 2000), 3 seeds: the fraction of runs in
each regime after 1000 and after 5000 steps (a sweep for each horizon: the
regime rests on the clean-label twin's error at that horizon), and the
excess error label noise causes (median over seeds)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ..plotting import boundary_crossings, draw_boundary, fit_power_boundary
from .common import save, sweep_records, write_numbers

READINGS = (1000, 5000)
SHOWN = ("not_overfitting", "partial", "benign", "harmful")


def records(quick: bool, cache: Path, steps: int) -> list[dict]:
    if quick:
        grid = {"n": [10, 20], "signal_norm": [5.0, 20.0, 60.0]}
        seeds = [0]
    else:
        grid = {"n": [10, 20, 40, 80], "signal_norm": [float(v) for v in np.geomspace(4, 80, 12).round(2)]}
        seeds = [0, 1, 2]
    base = {"d": 2000, "steps": steps, "log_every": 1000, "pop_log_points": 2, "engine": "reduced"}
    return sweep_records(cache, f"fig6_phase_{steps}", base, grid, seeds)


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    by_step = {step: records(quick, cache, step) for step in READINGS}
    recs = by_step[READINGS[0]]
    ns = sorted({r["config"]["n"] for r in recs})
    mus = sorted({r["config"]["signal_norm"] for r in recs})
    cols = len(SHOWN) + 1
    fig, axes = plt.subplots(len(READINGS), cols, figsize=(18, 6), sharex=True, sharey=True)
    snr = np.array(mus) / np.sqrt(2000)
    ticks = np.arange(0, len(mus), max(1, -(-len(mus) // 4)))  # at most four labels: they fit a panel
    for row, step in enumerate(READINGS):
        counts = {name: np.zeros((len(ns), len(mus))) for name in SHOWN}
        total = np.zeros((len(ns), len(mus)))
        excess = [[[] for _ in mus] for _ in ns]
        for r in by_step[step]:
            i, j = ns.index(r["config"]["n"]), mus.index(r["config"]["signal_norm"])
            name = r["final"]["regime"]
            total[i, j] += 1
            if name in counts:
                counts[name][i, j] += 1
            if r["final"]["excess_error"] is not None:
                excess[i][j].append(r["final"]["excess_error"])
        ex = np.array([[np.median(v) if v else np.nan for v in row_] for row_ in excess])
        ax = axes[row, -1]
        im_ex = ax.imshow(np.log10(np.maximum(ex, 1e-12)), origin="lower", aspect="auto", cmap="viridis",
                          vmin=-12, vmax=0)  # fmt: skip
        ax.set_title(f"log10 excess error, {step} steps", fontsize=9)
        ax.set_xticks(ticks, [f"{snr[t]:.2g}" for t in ticks])
        if row == len(READINGS) - 1:
            ax.set_xlabel("SNR = |mu| / sqrt(d)")
        for col, name in enumerate(SHOWN):
            ax = axes[row, col]
            frac = counts[name] / np.maximum(total, 1)
            im = ax.imshow(frac, origin="lower", aspect="auto", vmin=0, vmax=1, cmap="magma")
            ax.set_xticks(ticks, [f"{snr[t]:.2g}" for t in ticks])
            ax.set_yticks(range(len(ns)), [str(n) for n in ns])
            ax.set_title(f"{name} after {step} steps", fontsize=9)
            if row == len(READINGS) - 1:
                ax.set_xlabel("SNR = |mu| / sqrt(d)")
            if col == 0:
                ax.set_ylabel("n")
    for row, step in enumerate(READINGS):
        c = benign_boundary(by_step[step], ns, mus)
        if np.isfinite(c):  # n SNR^2 = c on the index grid of the panels (log-spaced SNR columns)
            col = lambda n, c=c: np.interp(
                np.log(np.sqrt(c / n)), np.log(snr), np.arange(len(mus)), left=np.nan, right=np.nan
            )  # fmt: skip  (not drawn off the grid)
            for ax in (axes[row, SHOWN.index("benign")], axes[row, -1]):
                draw_boundary(ax, lambda t, f=col: f(np.exp(np.interp(t, np.arange(len(ns)), np.log(ns)))),
                              np.linspace(0, len(ns) - 1, 50), independent="y", color="w",
                              label=f"n SNR^2 = {c:.2f}")  # fmt: skip
            axes[row, SHOWN.index("benign")].legend(fontsize=7, loc="upper left")
    fig.colorbar(im, ax=axes[:, :-1], label="fraction of runs", shrink=0.8)
    fig.colorbar(im_ex, ax=axes[:, -1], label="log10 excess error (median of seeds)", shrink=0.8)
    lines = []
    for step in READINGS:
        for n in ns:
            fin = [r["final"] for r in by_step[step] if r["config"]["n"] == n]
            names = [f["regime"] for f in fin]
            frac = ", ".join(f"{k} {names.count(k) / len(names):.2f}" for k in SHOWN if names.count(k))
            ungen = [r["config"]["signal_norm"] for r in by_step[step]
                     if r["config"]["n"] == n and not r["final"]["generalized"]]  # fmt: skip
            worst = max(fin, key=lambda f: f["excess_error"] if f["excess_error"] is not None else -1)
            lines.append(f"after {step} steps, n = {n}: {frac}; largest excess error "
                         f"{worst['excess_error']:.3g}; not generalizing at |mu| <= "
                         f"{max(ungen) if ungen else 'none'}")  # fmt: skip
        harm = [r["config"]["signal_norm"] for r in by_step[step] if r["final"]["regime"] == "harmful"]
        lines.append(f"after {step} steps: harmful runs at |mu| in {sorted(set(harm)) if harm else 'none'}")
    for step in READINGS:
        c, rows = benign_boundary(by_step[step], ns, mus, rows=True)
        lines.append(
            f"after {step} steps: boundary n SNR^2 = c fitted to the crossing ({rows} of {len(ns)} "
            f"n) out of the cells where at least half the seeds are benign: c = {c:.3g} (Jiang et "
            f"al. 2024's form; Magen et al.'s SNR sqrt(n) = {np.sqrt(c):.3g}: the same curve)"
        )
    return [save(fig, outdir / "fig6_phase.png"), write_numbers(outdir, "fig6_phase", lines)]


def benign_boundary(recs: list[dict], ns: list, mus: list, rows: bool = False) -> float | tuple[float, int]:
    """c of n SNR^2 = c: per n, the crossing in SNR out of the cells where at
    least half the seeds are benign (the label noise no longer memorized above
    it; NaN: no crossing); with ``rows``, also how many n have a crossing."""
    snr = np.array(mus) / np.sqrt(2000)
    good = benign_fraction(recs, ns, mus) >= 0.5
    c = fit_power_boundary(ns, snr, good, power=-0.5, edge="upper") ** 2
    return (c, boundary_crossings(ns, snr, good, edge="upper")[0].size) if rows else c


def benign_fraction(recs: list[dict], ns: list, mus: list) -> np.ndarray:
    """(n, |mu|) fraction of the seeds whose run is benign (0 where a cell has no run)."""
    frac = np.zeros((len(ns), len(mus)))
    total = np.zeros_like(frac)
    for r in recs:
        cell = ns.index(r["config"]["n"]), mus.index(r["config"]["signal_norm"])
        total[cell] += 1
        frac[cell] += r["final"]["regime"] == "benign"
    return frac / np.maximum(total, 1)
