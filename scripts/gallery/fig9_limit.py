"""Figure 9: where training ends. The cosine between the logit direction
q(tau) = W p and the max-margin direction of the final selection (the
att-SVM) up to 10^14 steps by gradient flow, for p trained with W = I and for
W and p trained; and the population error and fresh relevant score over time
against their hard-attention limits (dashed), at d = 2000."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnsim.metrics import format_error
from attnsim.plotting import log_steps
from attnsim.run import simulate

from .common import MU, save, write_numbers
from .fig8_generalization_time import HORIZON, records, sweeps  # noqa: F401  (sweeps: figure 8's, read here)

P_ONLY = {
    "train": "p",
    "init_W": "identity",
    "d": 200,
    "lr": 0.05,
    "integrator": "flow",
    "log_scale": "log",
    "log_points": 80,
    "pop_log_points": 80,
    "limit": True,
    "clean_twin": False,  # no number of the figure is the clean-label twin's
}


def _arr(tr: dict, key: str) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in tr[key]], dtype=float)


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    recs = [r for r in records(quick, cache)[2000] if r["config"]["seed"] == 0]
    recs.sort(key=lambda r: r["config"]["signal_norm"])
    pick = recs[2::3][:4] if len(recs) > 4 else recs
    p_only = simulate({**P_ONLY, "steps": 10**9 if quick else HORIZON})
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    tr = p_only.trajectory
    st = log_steps(tr["step"])
    axes[0].plot(st, tr["mm_cos"], "k-", label="p trained, W = I (d=200, lr=0.05)")
    lines = [
        "p trained, W = I, d=200: mm_cos "
        + ", ".join(
            f"{tr['mm_cos'][np.searchsorted(tr['step'], t)]:.4f} at 1e{int(np.log10(t))}"
            for t in (10**4, 10**6, 10**9, 10**12, 10**14)
            if t <= tr["step"][-1]
        )
    ]
    for i, r in enumerate(pick):
        t, L, color = r["trajectory"], r["limit"], f"C{i}"
        steps = log_steps(t["step"])
        mu = r["config"]["signal_norm"]
        axes[0].plot(steps, _arr(t, "mm_cos"), color=color, label=f"$W$, $p$ trained, {MU}={mu:g}")
        err, score = _arr(t, "pop_error"), _arr(t, "pop_score_relevant")
        ok = np.isfinite(err)
        axes[1].plot(steps[ok], err[ok], color=color, label=f"{MU}={mu:g}")
        axes[1].axhline(L["pop_error"], color=color, ls="--", lw=0.8)
        axes[2].plot(steps[ok], score[ok], color=color)
        axes[2].axhline(L["relevant_prob"], color=color, ls="--", lw=0.8)
        bound = r["config"]["benign_error"]
        in_limit = "above" if L["pop_error"] - r["final"]["bayes_error"] > bound else "at most"
        never = " (never reaches 1/2)" if L["gen_never"] else ""
        here = format_error(
            err[ok][-1], _arr(t, "pop_error_se")[ok][-1], _arr(t, "pop_error_resolved")[ok][-1]
        )
        lines.append(
            f"W, p trained, d=2000, |mu|={mu:g}: mm_cos {t['mm_cos'][-1]:.4f} at the horizon; population "
            f"error {here} there against {L['pop_error']:.3g} in the limit (quadrature); fresh relevant "
            f"score {score[ok][-1]:.3f} against limit probability {L['relevant_prob']:.3f}{never}; at the "
            f"horizon the run {'generalizes' if r['final']['generalized'] else 'does not generalize'}, "
            f"in the limit the error in excess of the Bayes error ({r['final']['bayes_error']:.2g}) is "
            f"{in_limit} benign_error = {bound:g}"
        )
    axes[2].axhline(0.5, color="0.5", lw=0.7)
    titles = (
        "cos(q(tau), q_mm)",
        "population error (dashed: hard-attention limit)",
        "fresh relevant score (dashed: limit probability of selecting it)",
    )
    for ax, title in zip(axes, titles):
        ax.set_xscale("log")
        ax.set_xlabel("step")
        ax.set_title(title, fontsize=10)
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return [save(fig, outdir / "fig9_limit.png"), write_numbers(outdir, "fig9_limit", lines)]
