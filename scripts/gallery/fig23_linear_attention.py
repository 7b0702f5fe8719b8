"""Figure 23: multi-head linear attention trained in context (Zhang, Singh, Latham and Saxe, ICML
2025), attnsim's sixth model: gradient flow on the population loss in closed form. (a) Rank-one
separate keys and queries (ATTN_S; D = 4, N = 31, 5 heads, the linear spectrum): the loss goes
saddle to saddle through L(M_0) ... L(M_4) (the theory's lines), from three initialization
scales, three seeds each. (b) The same from 1e-4 with merged key-query matrices (ATTN_M): one
drop, no staircase. (c) How long the plateaus last: the time the loss leaves L(M_m) against the
initialization scale, m = 0 ... 3 (median over seeds), each with a fitted power law t ~ s^-a
(its error from the seeds' spread); merged: against log(1/s). (d) Against the head count H at
s = 1e-4."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnsim.models.linear_attention.reference import eigenvalues, saddle_losses

from .common import arrays, records_of, save, sweep_mapping, write_numbers

BASE = {"model": "linear_attention", "d": 4, "context": 31, "heads": 5, "lr": 1.0, "log_scale": "log",
        "log_points": 1200}  # fmt: skip
SCALES = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6)
HEADS = (1, 2, 3, 4, 6, 8)
SAVE = ["population_loss"]


def sweeps(quick: bool) -> list[dict]:
    seeds = list(range(2 if quick else 5))
    scales = SCALES[:3] if quick else SCALES
    steps = lambda s: int(100.0 / s)  # noqa: E731  (the last plateau ends by about 40 / s)
    sep = [{"init_scale": s, "steps": steps(s)} for s in scales]
    # ATTN_M leaves L(M_0) after a time of order log(1/s): every step of lr 0.05 logged to t = 200
    merged = [{"init_scale": s, "steps": 4000, "lr": 0.05, "parametrization": "merged", "log_scale": "linear",
               "log_every": 1, "log_points": 200} for s in scales]  # fmt: skip
    heads = [{"init_scale": 1e-4, "steps": steps(1e-4), "heads": h} for h in (HEADS[:3] if quick else HEADS)]
    return [
        sweep_mapping("fig23_separate", BASE, {}, seeds, SAVE, points=sep),
        sweep_mapping("fig23_merged", BASE, {}, seeds, SAVE, points=merged),
        sweep_mapping("fig23_heads", BASE, {}, list(range(3 if quick else 10)), SAVE, points=heads),
    ]


def crossing(t: np.ndarray, loss: np.ndarray, level: float) -> float:
    """The first flow time the logged loss falls below ``level``, interpolated linearly in
    log t between the two log points around it (NaN if it never does). Defined whether or not
    the run rested on the plateau above (a run may pass two levels at once), unlike
    ``plateau_steps``."""
    below = np.flatnonzero(loss < level)
    if below.size == 0 or below[0] == 0:
        return float("nan")
    i = below[0]
    f = (loss[i - 1] - level) / (loss[i - 1] - loss[i])
    return float(np.exp(np.log(t[i - 1]) + f * (np.log(t[i]) - np.log(t[i - 1]))))


def exits(recs: list[dict], key: str, levels: list[float]) -> dict:
    """key value -> one row per seed: the times the loss fell below each of ``levels``."""
    out: dict = {}
    for r in recs:
        tr = arrays(r["trajectory"])
        t, loss = tr["step"][1:] * r["config"]["lr"], tr["population_loss"][1:]
        out.setdefault(r["config"][key], []).append([crossing(t, loss, v) for v in levels])
    return {k: np.array(v) for k, v in out.items()}


def fit(x: np.ndarray, t: np.ndarray, log_x: bool) -> tuple[float, float, float]:
    """t = c x^-a (or t = c0 + c1 log(1/x) with ``log_x``) by least squares for each seed (the
    columns of ``t``: rows are x); returns the seeds' mean slope, its standard error and the mean
    intercept."""
    X = np.log(1.0 / x) if log_x else -np.log(x)
    fits = np.array([np.polyfit(X, col if log_x else np.log(col), 1) for col in t.T])
    err = float(np.std(fits[:, 0], ddof=1) / math.sqrt(len(fits))) if len(fits) > 1 else float("nan")
    return float(fits[:, 0].mean()), err, float(fits[:, 1].mean())


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    sep, merged, heads = (records_of(cache, m) for m in sweeps(quick))
    saddles = saddle_losses(eigenvalues(4, "linear"), 31)
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.8), layout="constrained")
    lines = ["Zhang et al. (2025), multi-head linear attention in context, D = 4, N = 31, linear spectrum: "
             "gradient flow on the population loss (attnsim, exact closed-form loss)",
             "saddles L(M_0..4): " + ", ".join(f"{v:.10g}" for v in saddles)]  # fmt: skip
    for ax, recs, title in ((axes[0], sep, "(a) ATTN_S, rank one, 5 heads"),
                            (axes[1], [r for r in merged if r["config"]["init_scale"] == 1e-4],
                             "(b) ATTN_M, 5 heads, init 1e-4")):  # fmt: skip
        for v in saddles:
            ax.axhline(v, color="0.6", ls=":", lw=0.8)
        scales = sorted({r["config"]["init_scale"] for r in recs}, reverse=True)
        for i, s in enumerate(scales):
            for j, r in enumerate(rr for rr in recs if rr["config"]["init_scale"] == s):
                tr = arrays(r["trajectory"])
                t = tr["step"][1:] * r["config"]["lr"]
                ax.plot(t, tr["population_loss"][1:], color=f"C{i}", lw=1, alpha=0.8,
                        label=f"init {s:g}" if j == 0 else None)  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlabel("flow time t")
        ax.set_ylabel("population loss")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="lower left")
    # the plateau levels measured, each against its nearest saddle (a run may pass a level)
    lv = np.array([v for r in sep if r["config"]["init_scale"] <= 1e-4 for v in r["final"]["plateaus"]])
    gap = np.abs(lv[:, None] - saddles[None, :]).min(axis=1).max()
    runs = sum(r["config"]["init_scale"] <= 1e-4 for r in sep)
    lines.append(f"(a) the {lv.size} plateau levels of the {runs} runs from init <= 1e-4 against the "
                 f"nearest saddle: largest gap {gap:.1e}")  # fmt: skip
    merged_levels = [len(r["final"]["plateaus"]) for r in merged]
    lines.append(
        f"(b) ATTN_M: plateaus visited per run {sorted(set(merged_levels))} (the initial and the final level)"
    )
    # (c) exit times against the init scale: when the loss falls below the midpoint between
    # L(M_m) and L(M_m+1)
    mids = [(saddles[m] + saddles[m + 1]) / 2 for m in range(4)]
    ax = axes[2]
    ex = exits(sep, "init_scale", mids)
    xs = np.array(sorted(ex))
    for m in range(4):
        t = np.array([ex[x][:, m] for x in xs])  # scales x seeds
        a, err, _ = fit(xs, t, log_x=False)
        med = np.median(t, axis=1)
        ax.plot(xs, med, "o-", color=f"C{m}", ms=4,
                label=rf"left $L(M_{m})$: $t \propto s^{{-{a:.4f} \pm {err:.4f}}}$")  # fmt: skip
        shown = ", ".join(f"s = {x:g}: {v:.4g}" for x, v in zip(xs, med))
        lines.append(f"(c) ATTN_S rank one: the loss leaves L(M_{m}) at t ~ s^-({a:.4f} +- {err:.4f}) "
                     f"(mean of the seeds' fits +- its standard error); medians {shown}")  # fmt: skip
    exm = exits(merged, "init_scale", [(saddles[0] + saddles[-1]) / 2])
    xm = np.array(sorted(exm))
    tm = np.array([exm[x][:, 0] for x in xm])
    b, berr, c0 = fit(xm, tm, log_x=True)
    medm = np.median(tm, axis=1)
    ax.plot(xm, medm, "s--", color="k", ms=4, label=rf"ATTN_M leaves $L(M_0)$: {c0:.1f} + {b:.2f} log(1/s)")
    shown = ", ".join(f"s = {x:g}: {v:.4g}" for x, v in zip(xm, medm))
    lines.append(f"(c) ATTN_M: the loss leaves L(M_0) at t = {c0:.2f} + ({b:.4f} +- {berr:.4f}) log(1/s); "
                 f"medians {shown}")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("initialization scale s")
    ax.set_ylabel("time the loss leaves the plateau")
    ax.set_title("(c) plateau exits against the initialization", fontsize=10)
    ax.legend(fontsize=7)
    # (d) against the head count: a rank-one head learns one direction, so H heads reach L(M_min(H, 4))
    ax = axes[3]
    eh = exits(heads, "heads", mids)
    hs = np.array(sorted(eh))
    for m in range(4):
        # a seed that did not leave the plateau within the run (t = 100 / s = 1e6) counts as later
        # than every other: the median is still defined while fewer than half are late
        med = np.array([np.median(np.nan_to_num(eh[h][:, m], nan=np.inf)) if h > m else np.nan for h in hs])
        med[~np.isfinite(med)] = np.nan
        ax.plot(hs, med, "o-", color=f"C{m}", ms=4, label=rf"left $L(M_{m})$")
        late = {int(h): int(np.isnan(eh[h][:, m]).sum()) for h in hs if h > m and np.isnan(eh[h][:, m]).any()}
        lines.append(f"(d) init 1e-4: the loss leaves L(M_{m}) at (median over seeds) "
                     + ", ".join(f"H = {h}: {v:.4g}" for h, v in zip(hs, med) if h > m)
                     + (f"; not within t = 1e6 for {late} seeds (H: count)" if late else ""))  # fmt: skip
    # the first exit against H: log t = c - b log H over every run, the slope's error from the fit
    hh = np.concatenate([np.full(len(eh[h]), float(h)) for h in hs])
    t0 = np.concatenate([eh[h][:, 0] for h in hs])
    (b, c), cov = np.polyfit(np.log(hh), np.log(t0), 1, cov=True)
    se = math.sqrt(cov[0, 0])
    ax.plot(hs, np.exp(c) * hs**b, ":", color="C0", label=rf"$t \propto H^{{{b:.2f} \pm {se:.2f}}}$")
    lines.append(f"(d) the loss leaves L(M_0) at t ~ H^({b:.3f} +- {se:.3f}) (least squares "
                 f"on the log of {t0.size} runs, the slope's standard error)")  # fmt: skip
    last = lambda r: int(np.argmin(np.abs(saddles - r["final"]["population_loss"])))  # noqa: E731
    reached = {int(h): sorted({last(r) for r in heads if r["config"]["heads"] == h}) for h in hs}
    lines.append(f"(d) m of the saddle nearest the final loss, per H (a rank-one head learns one direction): "
                 f"{reached}")  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("heads H")
    ax.set_title("(d) plateau exits against the head count (init 1e-4)", fontsize=10)
    ax.legend(fontsize=7)
    stem = "fig23_linear_attention"
    return [save(fig, outdir / f"{stem}.png"), write_numbers(outdir, stem, lines)]
