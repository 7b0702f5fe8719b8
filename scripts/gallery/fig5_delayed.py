"""Figure 5: delayed generalization. Training loss and accuracy, population
loss and error, the fresh-sample score on the relevant token and the attention
gaps (with the fitted g-law) against steps on a log axis, up to 10^6 steps,
for |mu| in {5, 7.5, 10, 15, 20} at d = 2000 and |mu| = 5 at d = 4500.
Memorization (every training sample fitted for good) and generalization
(fresh relevant score >= 0.5 for good) times are marked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from attnsim.metrics import format_error
from attnsim.plotting import log_steps
from attnsim.report import format_step
from attnsim.theory import g_inv

from .common import records_of, save, sweep_mapping, write_numbers

if TYPE_CHECKING:  # names in annotations only
    from matplotlib.axes import Axes

SAVE = [
    "train_loss",
    "train_acc",
    "pop_loss",
    "pop_error",
    "pop_error_se",
    "pop_error_resolved",
    "pop_score_relevant",
    "gap_clean_eff",
    "gap_noisy_eff",
]
NORMS = [5.0, 7.5, 10.0, 15.0, 20.0]


def sweeps(quick: bool) -> list[dict]:
    steps = 10_000 if quick else 1_000_000
    # refine_times: the selection step located to the step, not the first log point past it
    base = {"steps": steps, "log_scale": "log", "log_points": 120, "pop_log_points": 120, "engine": "reduced",
            "refine_times": "true"}  # fmt: skip
    return [
        sweep_mapping("fig5_delayed", base, {"d": [2000], "signal_norm": NORMS}, [0], SAVE),
        sweep_mapping("fig5_delayed_4500", base, {"d": [4500], "signal_norm": [5.0]}, [0], SAVE),
    ]


def records(quick: bool, cache: Path) -> list[dict]:
    recs = records_of(cache, *sweeps(quick))
    return sorted(recs, key=lambda r: (r["config"]["d"], r["config"]["signal_norm"]))


def _label(r: dict) -> str:
    return f"d={r['config']['d']}, |mu|={r['config']['signal_norm']:g}"


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    recs = records(quick, cache)
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    ax_tl, ax_pl, ax_sc, ax_ta, ax_pe, ax_gap = axes.ravel()
    for i, r in enumerate(recs):
        tr, th, fin, color = r["trajectory"], r["theory"], r["final"], f"C{i}"
        st = log_steps(tr["step"])
        arr = {k: np.asarray(tr[k], dtype=float) for k in SAVE}
        ok = np.isfinite(arr["pop_loss"])
        ax_tl.plot(st, arr["train_loss"], color=color, label=_label(r))
        ax_ta.plot(st, arr["train_acc"], color=color)
        ax_pl.plot(st[ok], arr["pop_loss"][ok], color=color)
        err = (arr[k][ok] for k in ("pop_error", "pop_error_se", "pop_error_resolved"))
        plot_error(ax_pe, st[ok], *err, color)
        ax_sc.plot(st[ok], arr["pop_score_relevant"][ok], color=color)
        ax_gap.plot(st, arr["gap_clean_eff"], color=color)
        fit = th.get("g_law_clean")
        if fit:
            tau = st[st >= fit["from_step"]]
            ax_gap.plot(tau, g_inv(fit["intercept"] + fit["rate"] * tau, th["g_law_m"]), "k:", lw=1)
        for ax in (ax_tl, ax_ta, ax_pl, ax_pe, ax_sc):
            if (fin.get("t_memorize") or 0) >= 1:  # at step 0 there is no place on a log axis
                ax.axvline(fin["t_memorize"], color=color, ls="--", lw=0.7)
            if (fin.get("t_select") or 0) >= 1 and ax is ax_sc:
                ax.axvline(fin["t_select"], color=color, ls=":", lw=0.9)
    ax_sc.axhline(0.5, color="0.5", lw=0.7)
    titles = {
        ax_tl: "training loss",
        ax_ta: "training accuracy",
        ax_pl: "population (test) loss",
        ax_pe: "population (test) error (band: +-2 se; v: upper bounds, unresolved)",
        ax_sc: "fresh-sample score on the relevant token",
        ax_gap: "clean samples' effective gap (dotted: fitted g-law)",
    }
    for ax, title in titles.items():
        ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step (dashed: memorized; dotted: relevant token selected on new samples)")
    ax_pe.set_yscale("log")
    ax_tl.legend(fontsize=8)
    fig.tight_layout()
    return [save(fig, outdir / "fig5_delayed.png"), write_numbers(outdir, "fig5_delayed", summary(recs))]


def plot_error(
    ax: Axes, steps: np.ndarray, err: np.ndarray, se: np.ndarray, resolved: np.ndarray, color: str
) -> None:
    """A population error on a log axis with its +-2 se band; values the
    estimator could not resolve are upper bounds, drawn as downward triangles."""
    ok = resolved == 1.0
    ax.plot(steps[ok], err[ok], color=color)
    lo, hi = np.maximum(err - 2 * se, err * 1e-3), err + 2 * se
    ax.fill_between(steps[ok], lo[ok], hi[ok], color=color, alpha=0.2, lw=0)
    if (~ok).any():
        ax.plot(steps[~ok], err[~ok], "v", color=color, ms=4)


def summary(recs: list[dict]) -> list[str]:
    """One line per setting: the numbers docs/figures.md quotes."""
    lines = []
    for r in recs:
        tr, fin = r["trajectory"], r["final"]
        st = np.asarray(tr["step"], dtype=float)
        keys = ("pop_loss", "pop_error", "pop_error_se", "pop_error_resolved", "pop_score_relevant")
        pl, pe, se, res, sc = (np.asarray(tr[k], dtype=float) for k in keys)
        ok = np.isfinite(pl)
        st, pl, pe, se, res, sc = st[ok], pl[ok], pe[ok], se[ok], res[ok], sc[ok]
        tm = fin.get("t_memorize")
        mem = f"memorized at {tm}" if tm is not None else "not memorized"
        ts = fin.get("t_select")
        line = f"{_label(r)}: {mem}, relevant token selected at {format_step(ts) if ts is not None else None}"
        if tm is not None and tm < st[-1]:
            j = np.searchsorted(st, tm)
            line += (
                f"; after memorization: train loss {tr['train_loss'][-1]:.3f}, "
                f"pop loss {pl[j]:.3f} -> {pl[-1]:.3f}, relevant score {sc[j]:.3f} -> {sc[-1]:.3f}, "
                f"pop error {format_error(pe[j], se[j], res[j])} -> {format_error(pe[-1], se[-1], res[-1])}"
            )
        f = r["final"]
        twin = format_error(f["error_clean_twin"], f["error_clean_twin_se"], f["error_clean_twin_resolved"])
        cost = format_error(f["label_noise_cost"], f["label_noise_cost_se"], f["label_noise_cost_resolved"])
        line += f"; at {int(st[-1])} steps the clean-label twin errs {twin}, label noise costs {cost}"
        line += f" (Bayes error {f['bayes_error']:.2g}: regime {f['regime']})"
        lo = int(np.argmin(pe))
        line += f"; smallest error {format_error(pe[lo], se[lo], res[lo])} at step {int(st[lo])}"
        lines.append(line)
    return lines
