"""Figure 3: train loss, test (population) loss and the regime over the
(signal strength, dimension) plane, with SNR contours. One seed serves every
cell, as in the official runs; cells sharing d share the reduced setup."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.colors import ListedColormap

from ..metrics import REGIMES
from .common import grid_of, save, sweep_records, write_numbers

REGIME_COLORS = {"not_overfitting": "tab:blue", "partial": "tab:cyan", "benign": "tab:green",
                 "harmful": "tab:red", "underfit": "0.5", "fitted": "0.8"}  # fmt: skip


def records(quick: bool, cache: Path) -> list[dict]:
    if quick:
        grid = {"signal_norm": [5.0, 10.0, 20.0, 50.0, 100.0], "d": [250, 1000, 2500, 5000]}
    else:
        grid = {
            "signal_norm": {"start": 5.0, "stop": 100.0, "num": 39},
            "d": {"start": 250, "stop": 5000, "step": 125},
        }
    base = {"steps": 1000, "log_every": 1000, "pop_log_points": 2, "engine": "reduced"}
    return sweep_records(cache, "fig3_heatmap", base, grid, seeds=[0])


def plot_panels(
    axes, recs: list[dict], test_key: str = "pop_loss", test_title: str = "test (population) loss"
) -> None:
    snr = lambda r: r["theory"]["snr"]
    for ax, key, title in (
        (axes[0], "train_loss", "train loss"),
        (axes[1], test_key, test_title),
    ):
        xs, ys, Z = grid_of(recs, "signal_norm", "d", lambda r, k=key: r["final"][k])
        im = ax.pcolormesh(xs, ys, Z, shading="nearest", cmap="viridis")
        plt.colorbar(im, ax=ax)
        ax.set_title(title, fontsize=10)
    xs, ys, R = grid_of(recs, "signal_norm", "d", lambda r: REGIMES.index(r["final"]["regime"]))
    cmap = ListedColormap([REGIME_COLORS[r] for r in REGIMES])
    axes[2].pcolormesh(xs, ys, R, shading="nearest", cmap=cmap, vmin=-0.5, vmax=len(REGIMES) - 0.5)
    axes[2].set_title("regime at 1000 steps", fontsize=10)
    for name in REGIMES:
        if (R == REGIMES.index(name)).any():
            axes[2].plot([], [], "s", color=REGIME_COLORS[name], label=name)
    axes[2].legend(fontsize=7, loc="upper right")
    _, _, S = grid_of(recs, "signal_norm", "d", snr)
    for ax in axes:
        cs = ax.contour(xs, ys, S, levels=[0.1, 0.2, 0.4, 0.8, 1.6], colors="w", linewidths=0.7)
        ax.clabel(cs, fontsize=6, fmt="SNR %.1f")
        ax.set_xlabel("|mu|")
        ax.set_ylabel("d")


def numbers(recs: list[dict]) -> list[str]:
    """The regime counts and the loss levels the README quotes."""
    from collections import Counter

    count = Counter(r["final"]["regime"] for r in recs)
    lines = [f"{len(recs)} cells: " + ", ".join(f"{k} {v}" for k, v in sorted(count.items()))]
    unfit = [r for r in recs if r["final"]["n_fitted_noisy"] == 0]
    if unfit:
        tl = [r["final"]["train_loss"] for r in unfit]
        d_max, mu_min = max(r["config"]["d"] for r in unfit), min(r["config"]["signal_norm"] for r in unfit)
        lines.append(
            f"noisy samples all unfitted in {len(unfit)} cells (d <= {d_max}, |mu| >= {mu_min:g}): "
            f"train loss {min(tl):.3f}-{max(tl):.3f}"
        )
    for lo, hi in ((5, 10), (10, 15), (15, 100)):
        pl = [r["final"]["pop_loss"] for r in recs if lo <= r["config"]["signal_norm"] < hi or hi == 100 and
              r["config"]["signal_norm"] == 100]  # fmt: skip
        if pl:
            lines.append(f"test (population) loss for {lo} <= |mu| < {hi}: {min(pl):.3f}-{max(pl):.3f}")
    harmful = [r["config"]["signal_norm"] for r in recs if r["final"]["regime"] == "harmful"]
    if harmful:
        lines.append(f"harmful at |mu| <= {max(harmful):g}")
    return lines


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    recs = records(quick, cache)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    plot_panels(axes, recs)
    fig.tight_layout()
    return [save(fig, outdir / "fig3_heatmaps.png"), write_numbers(outdir, "fig3_heatmaps", numbers(recs))]
