"""Drawing on given Axes. Nothing here creates or saves a figure."""

from __future__ import annotations

import numpy as np

from .data import ROLE_NAMES

ROLE_COLORS = {
    "relevant": "tab:green",
    "weak_aligned": "tab:blue",
    "weak_opposite": "tab:red",
    "irrelevant": "0.6",
}


def token_labels(roles: np.ndarray | None, T: int) -> list[tuple[str, str]]:
    """(label, color) per token position from its role."""
    if roles is None:
        return [(f"token {t}", f"C{t % 10}") for t in range(T)]
    return [(ROLE_NAMES[r], ROLE_COLORS[ROLE_NAMES[r]]) for r in roles]


def plot_sample_scores(ax, steps, scores, roles=None, title: str = "", logx: bool = False) -> None:
    """Every token's score of one sample against step.

    steps : (L,); scores : (L, T); roles : (T,) role codes or None.
    """
    seen = set()
    for t, (label, color) in enumerate(token_labels(roles, scores.shape[1])):
        lab = label if label not in seen else None
        seen.add(label)
        ax.plot(steps, scores[:, t], color=color, label=lab, lw=1.5 if label != "irrelevant" else 0.8)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("step")
    ax.set_ylabel("attention score")
    if logx:
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(left=0)
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="center right")


def plot_example_scores(axes, result) -> None:
    """One clean and one noisy training sample of a Result on two Axes."""
    tr = result.trajectory
    steps, ex, idx = tr["step"], tr["example_scores"], tr["example_index"]
    roles = result.trajectory.get("roles")
    logx = result.config.get("log_scale") == "log"
    for a, (ax, kind) in enumerate(zip(axes, ("clean", "noisy"))):
        if idx[a] < 0:
            ax.set_axis_off()
            ax.set_title(f"no {kind} sample", fontsize=10)
            continue
        r = roles[idx[a]] if roles is not None else None
        plot_sample_scores(ax, steps, ex[:, a], r, f"{kind} sample {idx[a]}", logx=logx)


def plot_gaps(ax, result) -> None:
    """Clean samples' relevant-token gaps and noisy samples' fitting gaps
    (effective gaps, group means) against the fitted g-law."""
    from .theory import g_inv

    tr, th = result.trajectory, result.theory
    steps = tr["step"]
    m = th.get("g_law_m") or (result.config["T"] - 1)
    for group, color in (("clean", "tab:green"), ("noisy", "tab:red")):
        key = f"gap_{group}_eff"
        if key not in tr or not np.isfinite(tr[key]).any():
            continue
        ax.plot(steps, tr[key], color=color, lw=2, label=f"{group}: effective gap (simulated)")
        ax.plot(steps, tr[f"gap_{group}_min"], color=color, lw=0.8, ls="--", label=f"{group}: smallest gap")
        fit = th.get(f"g_law_{group}")
        if fit:
            tau = steps[steps >= fit["from_step"]]
            law = g_inv(fit["intercept"] + fit["rate"] * tau, m)
            ax.plot(tau, law, color="k", lw=1, ls=":")
            ax.annotate(
                f"g-law c={fit['rate']:.3g}/step, max dev {fit['max_dev']:.2g}",
                (tau[-1], law[-1]), fontsize=7, ha="right", va="bottom",
            )  # fmt: skip
    ax.axhline(np.log(m), color="0.7", lw=0.8)
    ax.set_xscale("symlog", linthresh=max(1, steps[1] if steps.size > 1 else 1))
    ax.set_xlim(left=0)
    ax.set_xlabel("step")
    ax.set_ylabel("logit gap")
    ax.legend(fontsize=7, loc="upper left")
