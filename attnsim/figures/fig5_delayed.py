"""Figure 5: delayed generalization. Training loss and accuracy, population
loss and error, the fresh-sample score on the relevant token and the attention
gaps (with the fitted g-law) against steps on a log axis, up to 10^6 steps,
for |mu| in {5, 7.5, 10, 15, 20} at d = 2000 and |mu| = 5 at d = 4500.
Memorization (every training sample fitted for good) and generalization
(fresh relevant score >= 0.5 for good) times are marked."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ..theory import g_inv
from .common import save, sweep_records, write_numbers

SAVE = [
    "train_loss",
    "train_acc",
    "pop_loss",
    "pop_error",
    "pop_score_relevant",
    "gap_clean_eff",
    "gap_noisy_eff",
]
NORMS = [5.0, 7.5, 10.0, 15.0, 20.0]


def records(quick: bool, cache: Path) -> list[dict]:
    steps = 10_000 if quick else 1_000_000
    base = {"steps": steps, "log_scale": "log", "log_points": 120, "pop_log_points": 120, "engine": "reduced"}
    recs = sweep_records(cache, "fig5_delayed", base, {"d": [2000], "signal_norm": NORMS}, [0], SAVE)
    recs += sweep_records(cache, "fig5_delayed_4500", base, {"d": [4500], "signal_norm": [5.0]}, [0], SAVE)
    return sorted(recs, key=lambda r: (r["config"]["d"], r["config"]["signal_norm"]))


def _label(r: dict) -> str:
    return f"d={r['config']['d']}, |mu|={r['config']['signal_norm']:g}"


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    recs = records(quick, cache)
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    ax_tl, ax_pl, ax_sc, ax_ta, ax_pe, ax_gap = axes.ravel()
    for i, r in enumerate(recs):
        tr, th, color = r["trajectory"], r["theory"], f"C{i}"
        st = np.maximum(np.asarray(tr["step"], dtype=float), 0.5)
        arr = {k: np.asarray(tr[k], dtype=float) for k in SAVE}
        ok = np.isfinite(arr["pop_loss"])
        ax_tl.plot(st, arr["train_loss"], color=color, label=_label(r))
        ax_ta.plot(st, arr["train_acc"], color=color)
        ax_pl.plot(st[ok], arr["pop_loss"][ok], color=color)
        ax_pe.plot(st[ok], np.maximum(arr["pop_error"][ok], 1e-30), color=color)
        ax_sc.plot(st[ok], arr["pop_score_relevant"][ok], color=color)
        ax_gap.plot(st, arr["gap_clean_eff"], color=color)
        fit = th.get("g_law_clean")
        if fit:
            tau = st[st >= fit["from_step"]]
            ax_gap.plot(tau, g_inv(fit["intercept"] + fit["rate"] * tau, th["g_law_m"]), "k:", lw=1)
        for ax in (ax_tl, ax_ta, ax_pl, ax_pe, ax_sc):
            if th.get("t_memorize") is not None:
                ax.axvline(max(th["t_memorize"], 0.5), color=color, ls="--", lw=0.7)
            if th.get("t_generalize") is not None and ax is ax_sc:
                ax.axvline(max(th["t_generalize"], 0.5), color=color, ls=":", lw=0.9)
    ax_sc.axhline(0.5, color="0.5", lw=0.7)
    titles = {
        ax_tl: "training loss",
        ax_ta: "training accuracy",
        ax_pl: "population (test) loss",
        ax_pe: "population (test) error",
        ax_sc: "fresh-sample score on the relevant token",
        ax_gap: "clean samples' effective gap (dotted: fitted g-law)",
    }
    for ax, title in titles.items():
        ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step (dashed: memorized; dotted: generalized)")
    ax_pe.set_yscale("log")
    ax_tl.legend(fontsize=8)
    fig.tight_layout()
    return [save(fig, outdir / "fig5_delayed.png"), write_numbers(outdir, "fig5_delayed", summary(recs))]


def summary(recs: list[dict]) -> list[str]:
    """One line per setting: the numbers the README quotes."""
    lines = []
    for r in recs:
        tr, th = r["trajectory"], r["theory"]
        st = np.asarray(tr["step"], dtype=float)
        pl, pe, sc = (np.asarray(tr[k], dtype=float) for k in ("pop_loss", "pop_error", "pop_score_relevant"))
        ok = np.isfinite(pl)
        st, pl, pe, sc = st[ok], pl[ok], pe[ok], sc[ok]
        tm = th.get("t_memorize")
        mem = f"memorized at {tm}" if tm is not None else "not memorized"
        line = f"{_label(r)}: {mem}, generalized at {th.get('t_generalize')}"
        if tm is not None and tm < st[-1]:
            j = np.searchsorted(st, tm)
            line += (
                f"; after memorization: train loss {tr['train_loss'][-1]:.3f}, "
                f"pop loss {pl[j]:.3f} -> {pl[-1]:.3f}, relevant score {sc[j]:.3f} -> {sc[-1]:.3f}, "
                f"pop error {pe[j]:.2g} -> {pe[-1]:.2g}"
            )
        lines.append(line)
    return lines
