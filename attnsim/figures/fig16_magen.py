"""Figure 16: Magen et al. (2025) in attnsim: benign overfitting after two GD
steps when SNR = |mu| / (sigma sqrt(d)) is of order 1/sqrt(n). Their data
model (data_model = magen2025: T = 2, the signal token y mu and a noise token
orthogonal to mu), p and nu trained from 0 with W = I, i.i.d. flips at
eta = 0.1, two steps of lr = 0.012 at d = 50000 (lr d = 600), 3 seeds per cell.
Colour: the population error after the two steps (median of seeds); dots:
every label fitted and the error within benign_error = 0.05 (in all seeds);
crosses: some flipped label not fitted. The lines are SNR = c / sqrt(n), c
fitted to the edges of the benign band (the error's crossing of 0.05 below
it, the last benign cell above it); the numbers file gives the exponents of
free fits as well."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ..plotting import boundary_crossings, cell_edges, draw_boundary, fit_power_boundary
from .common import save, sweep_records, write_numbers

D = 50000
BASE = {"preset": "magen2025", "d": D, "lr": 600.0 / D}
BOUND = 0.05


def records(quick: bool, cache: Path) -> list[dict]:
    if quick:
        ns, snr, seeds = [25, 100], np.geomspace(0.01, 1.0, 5), [0]
    else:
        ns, snr, seeds = [25, 50, 100, 200, 400], np.geomspace(0.005, 2.0, 24), [0, 1, 2]
    grid = {"n": ns, "signal_norm": [float(v) for v in (snr * np.sqrt(D)).round(4)]}
    return sweep_records(cache, "fig16_magen", BASE, grid, seeds)


def cells(recs: list[dict]) -> tuple[np.ndarray, np.ndarray, dict]:
    """n values, SNR values, and per cell the median error, whether every seed is
    benign and generalizes, and whether any seed leaves a flipped label unfitted."""
    ns = sorted({r["config"]["n"] for r in recs})
    mus = sorted({r["config"]["signal_norm"] for r in recs})
    shape = (len(ns), len(mus))
    out = {"error": np.full(shape, np.nan), "benign": np.zeros(shape, bool), "unfit": np.zeros(shape, bool)}
    groups: dict = {}
    for r in recs:
        cell = ns.index(r["config"]["n"]), mus.index(r["config"]["signal_norm"])
        groups.setdefault(cell, []).append(r["final"])
    for (i, j), fin in groups.items():
        out["error"][i, j] = np.median([f["pop_error"] for f in fin])
        out["benign"][i, j] = all(f["regime"] == "benign" and f["generalized"] for f in fin)
        out["unfit"][i, j] = any(f["n_fitted_noisy"] < f["n_noisy"] for f in fin)
    return np.array(ns), np.array(mus) / np.sqrt(D), out


def draw(ax, recs: list[dict]) -> tuple[list[str], float]:
    ns, snr, c = cells(recs)
    X, Y = np.meshgrid(snr, ns)
    log_err = np.log10(np.maximum(c["error"], 1e-6))
    mesh = ax.pcolormesh(
        cell_edges(snr), cell_edges(ns), log_err, cmap="viridis", vmin=-6, vmax=np.log10(0.5)
    )
    ax.plot(X[c["benign"]], Y[c["benign"]], "w.", ms=5)
    ax.plot(X[c["unfit"]], Y[c["unfit"]], "rx", ms=4)
    benign = c["error"] <= BOUND
    lines = []
    for edge, color in (("lower", "w"), ("upper", "r")):
        good = benign if edge == "lower" else c["benign"]
        coef = fit_power_boundary(ns, snr, good, power=-0.5, edge=edge)
        draw_boundary(ax, lambda n, k=coef: k / np.sqrt(n), ns, independent="y", color=color,
                      label=f"{edge} edge: SNR = {coef:.2f} / sqrt(n)")  # fmt: skip
        rows, cross = boundary_crossings(ns, snr, good, edge)
        slope = np.polyfit(np.log(rows), np.log(cross), 1)[0] if rows.size > 1 else float("nan")
        at = ", ".join(f"{v:.3g} (n = {int(n)})" for n, v in zip(rows, cross))
        lines.append(f"{edge} edge of the benign band: SNR = {coef:.3f} / sqrt(n) fitted; crossings at SNR "
                     f"{at}; with a free exponent they fall like n^{slope:.2f}")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("SNR = |mu| / (sigma sqrt(d))")
    ax.set_ylabel("n")
    ax.legend(fontsize=8, loc="upper right")
    for i, n in enumerate(ns):
        ok = snr[c["benign"][i]]
        band = f"{ok.min():.3g} .. {ok.max():.3g} (SNR sqrt(n) {ok.min() * np.sqrt(n):.2f} .. " \
               f"{ok.max() * np.sqrt(n):.2f})" if ok.size else "none"  # fmt: skip
        lines.append(f"n = {n}: benign (every label fitted, error <= {BOUND}, all seeds) at SNR {band}; "
                     f"flipped labels left unfitted at SNR >= "
                     f"{snr[c['unfit'][i]].min() if c['unfit'][i].any() else 'none'}")  # fmt: skip
    return lines, mesh


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    recs = records(quick, cache)
    fig, ax = plt.subplots(figsize=(7.5, 5))
    lines, mesh = draw(ax, recs)
    fig.colorbar(mesh, ax=ax, label="log10 population error after two steps (median of seeds)")
    ax.set_title(f"magen2025 preset: two GD steps, d = {D}, eta = 0.1 (i.i.d.), lr d = 600", fontsize=9)
    lines.insert(0, "Magen et al. (2025): benign overfitting after two GD steps when SNR ~ 1/sqrt(n)")
    return [save(fig, outdir / "fig16_magen.png"), write_numbers(outdir, "fig16_magen", lines)]
