"""Figure 16: Magen et al. (2025) in attnsim. Their data model (data_model =
magen2025: T = 2, the signal token y mu and a noise token orthogonal to mu),
p and nu trained from 0 with W = I, i.i.d. flips at eta = 0.1, two steps of
lr = 0.012 at d = 50000 (lr d = 600), 5 seeds per cell, over n and SNR =
|mu| / (sigma sqrt(d)). Their claim: benign overfitting after two steps when
SNR is of order 1/sqrt(n).

Colour: the population error after the two steps (median of seeds; the Bayes
error is 0 here); dots: every seed benign (every label fitted, error within
benign_error = 0.05); crosses: some seed leaves a flipped label unfitted. The
band has two edges, each the error crossing 0.05, interpolated between cells
in log error and found per seed: the lower edge, where the error falls below
0.05 as the signal grows, and the upper edge, where it jumps back up (to about
0.25: one class's signal token is selected for every sample) with every
flipped label still fitted. Each edge is fitted as SNR = c n^b per seed; the
exponent is given as the mean over seeds with its standard error (the line
is drawn only where the seeds agree to 0.05), and the paper's n^-1/2 is drawn
beside it as the claim, not as a fit."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnsim.plotting import cell_edges, draw_boundary, fit_power_law, interpolated_crossings

from .common import ETA, records_of, save, sweep_mapping, write_numbers

D = 50000
BASE = {"preset": "magen2025", "d": D, "lr": 600.0 / D}
BOUND = 0.05
EDGES = ("lower", "upper")


def sweeps(quick: bool) -> list[dict]:
    if quick:
        ns, snr, seeds = [25, 100], np.geomspace(0.01, 1.0, 5), [0]
    else:
        ns, snr, seeds = [25, 50, 100, 200, 400], np.geomspace(0.005, 2.0, 24), [0, 1, 2, 3, 4]
    grid = {"n": ns, "signal_norm": [float(v) for v in (snr * np.sqrt(D)).round(4)]}
    return [sweep_mapping("fig16_magen", BASE, grid, seeds)]


def records(quick: bool, cache: Path) -> list[dict]:
    return records_of(cache, *sweeps(quick))


def cells(recs: list[dict]) -> tuple[np.ndarray, np.ndarray, dict]:
    """n values, SNR values, and per cell the median error, whether every seed is
    benign, whether any seed leaves a flipped label unfitted, and per seed the
    error (seed, n, SNR)."""
    ns = sorted({r["config"]["n"] for r in recs})
    mus = sorted({r["config"]["signal_norm"] for r in recs})
    seeds = sorted({r["config"]["seed"] for r in recs})
    shape = (len(ns), len(mus))
    out = {
        "error": np.full(shape, np.nan),
        "benign": np.zeros(shape, bool),
        "unfit": np.zeros(shape, bool),
        "per_seed": np.full((len(seeds), *shape), np.nan),
        "fitted_all": np.full((len(seeds), *shape), np.nan),
    }
    groups: dict = {}
    for r in recs:
        cell = ns.index(r["config"]["n"]), mus.index(r["config"]["signal_norm"])
        groups.setdefault(cell, []).append(r)
        f = r["final"]
        out["per_seed"][(seeds.index(r["config"]["seed"]), *cell)] = f["pop_error"]
        out["fitted_all"][(seeds.index(r["config"]["seed"]), *cell)] = f["n_fitted_noisy"] == f["n_noisy"]
    for (i, j), rs in groups.items():
        fin = [r["final"] for r in rs]
        out["error"][i, j] = np.median([f["pop_error"] for f in fin])
        out["benign"][i, j] = all(f["regime"] == "benign" for f in fin)
        out["unfit"][i, j] = any(f["n_fitted_noisy"] < f["n_noisy"] for f in fin)
    return np.array(ns), np.array(mus) / np.sqrt(D), out


def seed_edges(ns: np.ndarray, snr: np.ndarray, c: dict) -> dict[str, list[dict]]:
    """Per edge and seed: the crossings of the error through BOUND (interpolated in log
    error) and SNR = c n^b fitted over them."""
    out: dict = {edge: [] for edge in EDGES}
    for err in c["per_seed"]:
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.log(BOUND) - np.log(np.maximum(err, 1e-300))
        for edge in EDGES:
            rows, cross = interpolated_crossings(ns, snr, np.where(np.isfinite(err), score, np.nan), edge)
            out[edge].append({**fit_power_law(rows, cross), "rows": rows, "cross": cross})
    return out


def exponent(fits: list[dict]) -> tuple[float, float, int]:
    """Mean of the seeds' free exponents, its standard error over seeds, and how many seeds have one."""
    b = np.array([f["b"] for f in fits if f["points"] >= 3 and np.isfinite(f["b"])])
    if b.size == 0:
        return float("nan"), float("nan"), 0
    return (
        float(b.mean()),
        float(b.std(ddof=1) / np.sqrt(b.size)) if b.size > 1 else float("nan"),
        int(b.size),
    )


def draw(ax, recs: list[dict]) -> tuple[list[str], object]:
    ns, snr, c = cells(recs)
    X, Y = np.meshgrid(snr, ns)
    log_err = np.log10(np.maximum(c["error"], 1e-6))
    mesh = ax.pcolormesh(
        cell_edges(snr), cell_edges(ns), log_err, cmap="viridis", vmin=-6, vmax=np.log10(0.5)
    )
    ax.plot(X[c["benign"]], Y[c["benign"]], "w.", ms=5, label="benign: every seed")
    ax.plot(X[c["unfit"]], Y[c["unfit"]], "rx", ms=4, label="a seed leaves a flipped label unfitted")
    per_seed = seed_edges(ns, snr, c)
    lines = []
    for edge, color in zip(EDGES, ("w", "tab:orange")):
        fits = per_seed[edge]
        for k, fit in enumerate(fits):  # every seed's crossings: the spread of the edge
            ax.plot(
                fit["cross"],
                fit["rows"] * (1 + 0.03 * (k - len(fits) / 2)),
                "o",
                color=color,
                ms=2.5,
                mfc="none",
                label=f"{edge} edge per seed" if k == 0 else None,
            )
        b, b_se, used = exponent(fits)
        pooled_r = np.concatenate([f["rows"] for f in fits])
        pooled = (
            fit_power_law(pooled_r, np.concatenate([f["cross"] for f in fits])) if pooled_r.size else None
        )
        if pooled is not None and np.isfinite(b) and b_se < 0.05:  # only a law the seeds agree on
            draw_boundary(
                ax,
                lambda n, k=pooled["c"], e=b: k * n**e,
                ns,
                independent="y",
                color=color,
                lw=1.2,
                label=f"{edge}: SNR ~ $n^{{{b:.3f}}}$ (± {b_se:.3f})",
            )
        per = "; ".join(
            f"seed {k}: "
            + ", ".join(f"{v:.3g}" for v in f["cross"])
            + (f" (b {f['b']:.2f})" if f["points"] >= 3 else "")
            for k, f in enumerate(fits)
        )
        what = (
            "the error falls below 0.05 as the signal grows"
            if edge == "lower"
            else "the error jumps back above 0.05 (to about 0.25)"
        )
        lines.append(
            f"{edge} edge ({what}): SNR ~ n^b with b = {b:.3f} +- {b_se:.3f} (mean and standard error "
            f"over {used} seeds of per-seed least-squares fits over n = {', '.join(map(str, ns))}); "
            f"crossings per seed at SNR {per}"
        )
        if edge == "upper":
            spread = [f["b"] for f in fits if f["points"] >= 3]
            if spread and b_se >= 0.05:
                lines.append(
                    f"upper edge: the seeds' exponents range {min(spread):.2f} .. {max(spread):.2f}; its "
                    "crossings follow no one power law (the error is not monotone in SNR there), so "
                    "none is drawn"
                )
            lines.append(_upper_note(ns, snr, c, fits))
    anchor = _anchor(per_seed["lower"], ns)
    if anchor is not None:  # the paper's claim, drawn through the data's middle, not fitted
        n0, s0 = anchor
        draw_boundary(
            ax,
            lambda n: s0 * np.sqrt(n0 / n),
            ns,
            independent="y",
            color="k",
            lw=1,
            ls=":",
            label=f"Magen et al.'s SNR ~ $n^{{-1/2}}$ (through $n$ = {int(n0)})",
        )
        lines.append(
            f"the paper's SNR ~ 1/sqrt(n), through the lower edge's median crossing at n = {int(n0)} "
            f"(SNR {s0:.3g}), is drawn beside the data as the claim; the fitted exponent above is what "
            "the crossings carry"
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"SNR $= \|\mu\| / (\sigma\sqrt{d})$")
    ax.set_ylabel("n")
    # below the axes (the markers sit on every part of the map), on grey (the white ones are seen)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, facecolor="0.6",
              framealpha=1)  # fmt: skip
    for i, n in enumerate(ns):
        ok = snr[c["benign"][i]]
        band = (
            f"{ok.min():.3g} .. {ok.max():.3g} (SNR sqrt(n) {ok.min() * np.sqrt(n):.2f} .. "
            f"{ok.max() * np.sqrt(n):.2f})"
            if ok.size
            else "none"
        )
        unfit = snr[c["unfit"][i]]
        lines.append(
            f"n = {n}: benign in every seed at SNR {band}; some flipped label left unfitted at SNR >= "
            f"{f'{unfit.min():.3g}' if unfit.size else 'none'}"
        )
    return lines, mesh


def _anchor(fits: list[dict], ns: np.ndarray) -> tuple[float, float] | None:
    """(n, median crossing SNR) of the lower edge at the middle n with crossings."""
    have = [(n, [float(f["cross"][list(f["rows"]).index(n)]) for f in fits if n in f["rows"]]) for n in ns]
    have = [(n, v) for n, v in have if v]
    if not have:
        return None
    n0, v = have[len(have) // 2]
    return float(n0), float(np.median(v))


def _upper_note(ns: np.ndarray, snr: np.ndarray, c: dict, fits: list[dict]) -> str:
    """What the cells just above the upper edge are: their error and whether every flipped label is fitted."""
    errs, fitted = [], []
    for k, fit in enumerate(fits):
        for n, x in zip(fit["rows"], fit["cross"]):
            i, j = list(ns).index(n), int(np.searchsorted(snr, x))
            if j < snr.size:
                errs.append(c["per_seed"][k, i, j])
                fitted.append(c["fitted_all"][k, i, j])
    if not errs:
        return "upper edge: no crossing inside the grid"
    return (
        f"just above the upper edge the error is {np.median(errs):.3g} (median; {np.min(errs):.3g} .. "
        f"{np.max(errs):.3g}) and every flipped label is fitted in {int(np.nansum(fitted))} of {len(fitted)} "
        "of those runs: the edge is the error jumping up, not the flipped labels left unfitted"
    )


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    recs = records(quick, cache)
    fig, ax = plt.subplots(figsize=(7.5, 6.2), layout="constrained")
    lines, mesh = draw(ax, recs)
    fig.colorbar(mesh, ax=ax, label="log10 population error after two steps (median of seeds)")
    ax.set_title(f"magen2025 preset: two GD steps, $d$ = {D}, {ETA} = 0.1 (i.i.d.), lr $d$ = 600", fontsize=9)
    lines.insert(
        0,
        "Magen et al. (2025) claim benign overfitting after two GD steps when SNR ~ 1/sqrt(n); "
        "the Bayes error of their data model is 0",
    )
    return [save(fig, outdir / "fig16_magen.png"), write_numbers(outdir, "fig16_magen", lines)]
