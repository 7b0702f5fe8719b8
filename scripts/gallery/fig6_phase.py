"""Figure 6: phase diagram over the number of samples n and the signal
strength (SNR = |mu| / sqrt(d) at d = 2000), 3 seeds: one map of the regimes
(against the Bayes error, SPEC §3) after 1000 and one after 5000 steps, each
cell in its seeds' majority regime with the agreeing fraction written where
they differ (a sweep for each horizon: a run's verdict is that of its horizon),
and the cost of label noise (error over the clean-label twin, median over
seeds). The regime maps draw the edges of the benign band per n, with
SNR = c n^b fitted over the crossings; after 5000 steps also the edge of the
max-margin limit (where the limit's error in excess of the Bayes error falls
to benign_error: where training ends if it runs on)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from attnsim.plotting import cell_edges, describe_fit, draw_boundary, fit_power_law, interpolated_crossings

from .common import REGIME_COLORS, SNR, records_of, save, sweep_mapping, write_numbers

READINGS = (1000, 5000)
SHOWN = ("not_overfitting", "partial", "benign", "harmful")
D = 2000
EDGE_STYLE = {"lower": ("k", "|"), "upper": ("m", "x"), "limit": ("tab:orange", "+")}


def sweeps(quick: bool) -> list[dict]:
    """One sweep per reading (a run's verdict is that of its horizon)."""
    return [_sweep(quick, steps) for steps in READINGS]


def _sweep(quick: bool, steps: int) -> dict:
    if quick:
        grid = {"n": [10, 20], "signal_norm": [5.0, 20.0, 60.0]}
        seeds = [0]
    else:
        grid = {"n": [10, 20, 40, 80], "signal_norm": [float(v) for v in np.geomspace(4, 80, 12).round(2)]}
        seeds = [0, 1, 2]
    base = {"d": D, "steps": steps, "log_every": 1000, "pop_log_points": 2, "engine": "reduced"}
    if steps == READINGS[-1]:  # the limit of the longer horizon's selection (its times need no refining)
        base.update(limit=True, refine_times="false")
    return sweep_mapping(f"fig6_phase_{steps}", base, grid, seeds)


def records(quick: bool, cache: Path, steps: int) -> list[dict]:
    return records_of(cache, _sweep(quick, steps))


def _axes_of(recs: list[dict]) -> tuple[list, list, np.ndarray]:
    ns = sorted({r["config"]["n"] for r in recs})
    mus = sorted({r["config"]["signal_norm"] for r in recs})
    return ns, mus, np.array(mus) / np.sqrt(D)


def cell_stats(recs: list[dict]) -> dict[str, np.ndarray]:
    """Per (n, |mu|) cell: the fraction of seeds in each regime, and the medians
    over seeds of the excess error, the cost of label noise and the limit's excess."""
    ns, mus, _ = _axes_of(recs)
    shape = (len(ns), len(mus))
    cells: dict = {}
    for r in recs:
        cells.setdefault((ns.index(r["config"]["n"]), mus.index(r["config"]["signal_norm"])), []).append(r)
    out = {name: np.zeros(shape) for name in SHOWN}
    for key in ("excess", "cost", "limit"):
        out[key] = np.full(shape, np.nan)
    for (i, j), rs in cells.items():
        fin = [r["final"] for r in rs]
        for name in SHOWN:
            out[name][i, j] = np.mean([f["regime"] == name for f in fin])
        out["excess"][i, j] = np.median([f["excess_error"] for f in fin])
        cost = [f["label_noise_cost"] for f in fin if f["label_noise_cost"] is not None]
        out["cost"][i, j] = np.median(cost) if cost else np.nan
        lim = [
            r["limit"]["pop_error"] - r["final"]["bayes_error"]
            for r in rs
            if (r.get("limit") or {}).get("pop_error") is not None
        ]
        out["limit"][i, j] = np.median(lim) if lim else np.nan
    return out


def edges(recs: list[dict]) -> dict[str, dict]:
    """Per n the crossings in SNR of the benign band's edges, and SNR = c n^b fitted
    over them (:func:`attnsim.plotting.fit_power_law`): ``lower``, where the median
    excess error falls to benign_error (interpolated in log excess); ``upper``,
    where fewer than half the seeds stay benign (the flipped labels no longer all
    memorized within the horizon); ``limit``, where the max-margin limit's median
    excess falls to benign_error (runs with the limit only)."""
    ns, _, snr = _axes_of(recs)
    st = cell_stats(recs)
    level = recs[0]["config"]["benign_error"]
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = {
            "lower": np.log(level) - np.log(np.maximum(st["excess"], 1e-300)),
            "upper": st["benign"] - 0.5,
            "limit": np.log(level) - np.log(np.maximum(st["limit"], 1e-300)),
        }
    out = {}
    for edge, score in scores.items():
        if edge == "limit" and not np.isfinite(st["limit"]).any():
            continue
        rows, cross = interpolated_crossings(
            ns, snr, np.where(np.isfinite(score), score, np.nan), "upper" if edge == "upper" else "lower"
        )
        out[edge] = {
            **fit_power_law(rows, cross),
            "fixed": fit_power_law(rows, cross, power=-0.5),
            "rows": rows,
            "cross": cross,
        }
    return out


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    by_step = {step: records(quick, cache, step) for step in READINGS}
    ns, mus, snr = _axes_of(by_step[READINGS[0]])
    xe, ye = cell_edges(snr), cell_edges(np.array(ns, dtype=float))
    fig, axes = plt.subplots(
        len(READINGS), 2, figsize=(12.5, 9), sharex=True, sharey=True, layout="constrained"
    )
    lines = []
    for row, step in enumerate(READINGS):
        recs = by_step[step]
        st = cell_stats(recs)
        ax = axes[row, 0]
        _draw_regimes(ax, xe, ye, st)
        ax.set_title(f"regime after {step} steps (numbers: share of seeds, where they differ)")
        ax_c = axes[row, 1]
        im_c = ax_c.pcolormesh(
            xe, ye, np.log10(np.maximum(st["cost"], 1e-12)), cmap="viridis", vmin=-12, vmax=0
        )
        ax_c.set_title(f"log$_{{10}}$ cost of label noise after {step} steps")
        found = edges(recs)
        for edge, fit in found.items():
            color, marker = EDGE_STYLE[edge]
            ax.plot(
                fit["cross"],
                fit["rows"],
                marker,
                color=color,
                ms=9,
                mew=2,
                label=f"{edge} edge of the benign band ({fit['points']} of {len(ns)} $n$)",
            )
            if fit["points"] >= 3:
                draw_boundary(
                    ax,
                    lambda n, f=fit: f["c"] * n ** f["b"],
                    np.geomspace(ns[0], ns[-1], 40),
                    independent="y",
                    color=color,
                    lw=1.2,
                    ls="-",
                )
            lines.append(
                f"after {step} steps, {edge} edge ({_what(edge)}), SNR = c n^b: {describe_fit(fit)}"
                + _fixed(fit)
            )
        ax.legend(fontsize=8, loc="upper right", framealpha=0.9)
        for n in ns:
            fin = [r["final"] for r in recs if r["config"]["n"] == n]
            names = [f["regime"] for f in fin]
            frac = ", ".join(f"{k} {names.count(k) / len(names):.2f}" for k in SHOWN if names.count(k))
            ungen = [
                r["config"]["signal_norm"]
                for r in recs
                if r["config"]["n"] == n and r["final"]["generalized"] is False
            ]
            cost = max(
                (f["label_noise_cost"] for f in fin if f["label_noise_cost"] is not None), default=np.nan
            )
            lines.append(
                f"after {step} steps, n = {n}: {frac}; largest cost of label noise {cost:.3g}; "
                f"not generalizing at |mu| <= {max(ungen) if ungen else 'none'}"
            )
        harm = [r["config"]["signal_norm"] for r in recs if r["final"]["regime"] == "harmful"]
        lines.append(f"after {step} steps: harmful runs at |mu| in {sorted(set(harm)) if harm else 'none'}")
    for ax in axes.flat:
        ax.set_xscale("log")
        ax.set_yscale("log")
    for ax in axes[-1]:
        ax.set_xlabel(SNR + f" at $d$ = {D}")
    for ax in axes[:, 0]:
        ax.set_ylabel("$n$")
        ax.set_yticks(ns, [str(n) for n in ns], minor=False)
        ax.set_yticks([], minor=True)
    fig.colorbar(
        im_c, ax=axes[:, -1], label="log$_{10}$ (error $-$ clean-label twin's), median of seeds", shrink=0.8
    )
    handles = [Patch(color=REGIME_COLORS[name], label=name.replace("_", " ")) for name in SHOWN]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(SHOWN), fontsize=10, title="regime")
    recs = by_step[READINGS[-1]]
    parts = []
    for n in ns:  # how long memorizing takes, against the signal: what moves the upper edge
        mem = sorted(
            (r["config"]["signal_norm"], r["final"]["t_memorize"])
            for r in recs
            if r["config"]["n"] == n and r["final"]["t_memorize"] is not None
        )
        if len(mem) >= 2:
            lo, hi = mem[0], mem[-1]
            parts.append(f"n = {n}: step {lo[1]} at |mu| = {lo[0]:g}, step {hi[1]} at |mu| = {hi[0]:g}")
    partial = {
        step: np.mean([r["final"]["regime"] in ("partial", "not_overfitting") for r in by_step[step]])
        for step in READINGS
    }
    lines.append(
        "the upper edge is a horizon: above it the runs have not memorized every flipped label yet "
        f"(partial or not overfitting: {partial[READINGS[0]]:.2f} of the runs after {READINGS[0]} steps, "
        f"{partial[READINGS[-1]]:.2f} after {READINGS[-1]}), and the memorization time grows with the signal "
        f"(t_memorize of the runs that memorize within {READINGS[-1]} steps: " + "; ".join(parts) + ")"
    )
    return [save(fig, outdir / "fig6_phase.png"), write_numbers(outdir, "fig6_phase", lines)]


def _draw_regimes(ax, xe: np.ndarray, ye: np.ndarray, st: dict[str, np.ndarray]) -> None:
    """Each cell in the colour of its seeds' majority regime, with the fraction of seeds in
    it written where they do not all agree."""
    frac = np.stack([st[name] for name in SHOWN])
    major = frac.argmax(axis=0)
    cmap = ListedColormap([REGIME_COLORS[name] for name in SHOWN])
    ax.pcolormesh(xe, ye, major, cmap=cmap, vmin=-0.5, vmax=len(SHOWN) - 0.5)
    xc, yc = np.sqrt(xe[:-1] * xe[1:]), np.sqrt(ye[:-1] * ye[1:])
    for i, j in zip(*np.nonzero(frac.max(axis=0) < 1)):
        ax.text(xc[j], yc[i], f"{frac[major[i, j], i, j]:.2f}", ha="center", va="center", fontsize=7)


def _what(edge: str) -> str:
    return {
        "lower": "the median error in excess of the Bayes error falls to benign_error",
        "upper": "fewer than half the seeds stay benign as the signal grows",
        "limit": "the max-margin limit's median excess error falls to benign_error",
    }[edge]


def _fixed(fit: dict) -> str:
    f = fit["fixed"]
    if f["points"] < 2:
        return ""
    return f"; with b held at -1/2 (n SNR^2 = c'): c' = {f['c'] ** 2:.3g}, rms {f['rms']:.2g} decades"


def benign_fraction(recs: list[dict], ns: list, mus: list) -> np.ndarray:
    """(n, |mu|) fraction of the seeds whose run is benign (0 where a cell has no run)."""
    frac = np.zeros((len(ns), len(mus)))
    total = np.zeros_like(frac)
    for r in recs:
        cell = ns.index(r["config"]["n"]), mus.index(r["config"]["signal_norm"])
        total[cell] += 1
        frac[cell] += r["final"]["regime"] == "benign"
    return frac / np.maximum(total, 1)
