"""Figure 3: train loss, test (population) loss, the regime (against the Bayes
error, SPEC §3) and the cost of label noise (error over each cell's
clean-label twin) over the (signal strength, dimension) plane, with SNR
contours. One seed serves every cell, as in the official runs; cells sharing
d share the reduced setup. The regime panel draws both edges of the benign
band with power laws |mu| = c d^b fitted over every d's crossing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap

from attnsim.metrics import REGIMES
from attnsim.plotting import (
    describe_fit,
    draw_boundary,
    fit_power_law,
    interpolated_crossings,
    label_contours,
)

from .common import MU, REGIME_COLORS, grid_of, records_of, save, sweep_mapping, write_numbers

if TYPE_CHECKING:  # names in annotations only
    from matplotlib.axes import Axes


def sweeps(quick: bool) -> list[dict]:
    if quick:
        grid = {"signal_norm": [5.0, 10.0, 20.0, 50.0, 100.0], "d": [250, 1000, 2500, 5000]}
    else:
        grid = {
            "signal_norm": {"start": 5.0, "stop": 100.0, "num": 39},
            "d": {"start": 250, "stop": 5000, "step": 125},
        }
    base = {"steps": 1000, "log_every": 1000, "pop_log_points": 2, "engine": "reduced"}
    return [sweep_mapping("fig3_heatmap", base, grid, [0])]


def records(quick: bool, cache: Path) -> list[dict]:
    return records_of(cache, *sweeps(quick))


def plot_panels(
    axes: Sequence[Axes],
    recs: list[dict],
    test_key: str = "pop_loss",
    test_title: str = "test (population) loss",
) -> None:
    snr = lambda r: r["theory"]["snr"]
    for ax, key, title in (
        (axes[0], "train_loss", "train loss"),
        (axes[1], test_key, test_title),
    ):
        xs, ys, Z = grid_of(recs, "signal_norm", "d", lambda r, k=key: r["final"][k])
        im = ax.pcolormesh(xs, ys, Z, shading="nearest", cmap="viridis")
        plt.colorbar(im, ax=ax)
        ax.set_title(title, fontsize=11)
    xs, ys, R = grid_of(recs, "signal_norm", "d", lambda r: REGIMES.index(r["final"]["regime"]))
    cmap = ListedColormap([REGIME_COLORS[r] for r in REGIMES])
    axes[2].pcolormesh(xs, ys, R, shading="nearest", cmap=cmap, vmin=-0.5, vmax=len(REGIMES) - 0.5)
    rule = recs[0]["final"].get("regime_rule", "")
    axes[2].set_title(f"regime at 1000 steps ({rule})", fontsize=11)
    for name in REGIMES:
        if (R == REGIMES.index(name)).any():
            axes[2].plot([], [], "s", color=REGIME_COLORS[name], label=name)
    for edge, fit in edges(recs).items():
        marker = "k|" if edge == "lower" else "kx"
        axes[2].plot(fit["cross"], fit["rows"], marker, ms=4, label=f"{edge} edge, per d ({fit['points']})")
        if fit["points"] >= 3 and fit["b_se"] < 0.1:  # a law the crossings carry
            draw_boundary(
                axes[2],
                lambda d, f=fit: f["c"] * d ** f["b"],
                ys,
                independent="y",
                color="k",
                lw=1,
                label=f"{MU} ~ $d^{{{fit['b']:.2f}}}$ (± {fit['b_se']:.2f})",
            )
    if len(axes) > 3:  # the 2 x 2 figure: below the panel, where it hides no cell
        axes[2].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=4)
    else:
        axes[2].legend(fontsize=7, loc="upper right")
    if len(axes) > 3:
        xs, ys, E = grid_of(recs, "signal_norm", "d", lambda r: r["final"]["label_noise_cost"])
        im = axes[3].pcolormesh(
            xs, ys, np.log10(np.maximum(E, 1e-12)), shading="nearest", cmap="magma", vmin=-12, vmax=0
        )
        plt.colorbar(im, ax=axes[3])
        axes[3].contour(xs, ys, E, levels=[recs[0]["config"]["benign_error"]], colors="c", linewidths=1.2)
        axes[3].set_title(
            "log$_{10}$ cost of label noise: error $-$ clean-label twin's\n(cyan: benign_error)", fontsize=11
        )
    _, _, S = grid_of(recs, "signal_norm", "d", snr)
    for ax in axes:
        cs = ax.contour(xs, ys, S, levels=[0.1, 0.2, 0.4, 0.8, 1.6], colors="w", linewidths=0.7)
        label_contours(ax, cs, "SNR %.1f")
        ax.set_xlabel(MU)
        ax.set_ylabel("$d$")


def edges(recs: list[dict]) -> dict[str, dict]:
    """The two edges of the benign band as |mu| = c d^b, fitted over the
    crossings of every d (:func:`attnsim.plotting.fit_power_law`): ``lower``,
    where the error in excess of the Bayes error falls to benign_error as |mu|
    grows (interpolated in log excess between cells); ``upper``, where the runs
    stop being benign (the flipped labels no longer all memorized within the
    horizon; half-way between the cells)."""
    xs, ys, E = grid_of(recs, "signal_norm", "d", lambda r: r["final"]["excess_error"])
    _, _, B = grid_of(recs, "signal_norm", "d", lambda r: r["final"]["regime"] == "benign")
    level = recs[0]["config"]["benign_error"]
    with np.errstate(divide="ignore", invalid="ignore"):
        low = np.log(level) - np.log(np.maximum(E, 1e-300))
    out = {
        "lower": interpolated_crossings(ys, xs, np.where(np.isfinite(E), low, np.nan), "lower"),
        "upper": interpolated_crossings(ys, xs, np.where(B == 1, 1.0, -1.0), "upper"),
    }
    return {
        edge: fit_power_law(*rc) | {"fixed": fit_power_law(*rc, power=0.5), "rows": rc[0], "cross": rc[1]}
        for edge, rc in out.items()
    }


def numbers(recs: list[dict]) -> list[str]:
    """The regime counts and the loss levels docs/figures.md quotes."""
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
        pl = [
            r["final"]["pop_loss"]
            for r in recs
            if lo <= r["config"]["signal_norm"] < hi or hi == 100 and r["config"]["signal_norm"] == 100
        ]
        if pl:
            lines.append(f"test (population) loss for {lo} <= |mu| < {hi}: {min(pl):.3f}-{max(pl):.3f}")
    harmful = [r["config"]["signal_norm"] for r in recs if r["final"]["regime"] == "harmful"]
    lines.append(f"harmful at |mu| in {sorted(set(harmful))}" if harmful else "no harmful cell")
    harmful_twin = [
        r
        for r in recs
        if r["final"]["regime"] == "harmful"
        and r["final"]["error_clean_twin"] is not None
        and r["final"]["error_clean_twin"] - r["final"]["bayes_error"] > r["config"]["benign_error"]
    ]
    if harmful:
        lines.append(
            f"of the {len(harmful)} harmful cells, {len(harmful_twin)} have a clean-label twin "
            "as far from the Bayes error (the task is not solved with clean labels either)"
        )
    ungen = [r for r in recs if r["final"]["generalized"] is False]
    if ungen:
        lines.append(
            f"not generalizing (error more than benign_error above the Bayes error) in {len(ungen)} "
            f"cells, at |mu| <= {max(r['config']['signal_norm'] for r in ungen):g}"
        )
    ex = [(r["final"]["label_noise_cost"], r) for r in recs if r["final"]["label_noise_cost"] is not None]
    if ex:
        worst, r = max(ex, key=lambda v: v[0])
        where = f"(|mu|, d) = ({r['config']['signal_norm']:g}, {r['config']['d']})"
        lines.append(
            f"largest cost of label noise (error - clean-label twin's) {worst:.3g} at {where}; "
            f"cells where it is above 1e-3: {sum(v > 1e-3 for v, _ in ex)}"
        )
    n = recs[0]["config"]["n"]
    for edge, fit in edges(recs).items():
        what = (
            "where the error in excess of the Bayes error falls to benign_error"
            if edge == "lower"
            else "where the runs stop memorizing every flipped label"
        )
        fixed = fit["fixed"]
        form = (
            f"; with b held at 1/2 (n SNR^2 = c', Jiang et al.'s form): c' = {n * fixed['c'] ** 2:.3g}, "
            f"rms {fixed['rms']:.2g} decades"
            if fixed["points"] > 1
            else ""
        )
        lines.append(f"{edge} edge of the benign band ({what}), |mu| = c d^b: {describe_fit(fit, 'd')}{form}")
    unresolved = sum(r["final"]["pop_error_resolved"] == 0.0 for r in recs)
    lines.append(
        f"population errors the estimator could not resolve (upper bounds): {unresolved} of {len(recs)}"
    )
    return lines


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    recs = records(quick, cache)
    fig, axes = plt.subplots(2, 2, figsize=(12.5, 9.5))
    plot_panels(axes.ravel(), recs)
    fig.tight_layout()
    return [save(fig, outdir / "fig3_heatmaps.png"), write_numbers(outdir, "fig3_heatmaps", numbers(recs))]
