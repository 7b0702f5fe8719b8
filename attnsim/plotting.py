"""Drawing on given Axes. Nothing here creates or saves a figure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from .boundaries import (  # noqa: F401  (drawn on phase diagrams: part of this module's interface)
    boundary_crossings,
    boundary_points,
    cell_edges,
    describe_fit,
    draw_boundary,
    fit_power_boundary,
    fit_power_law,
    interpolated_crossings,
)
from .data.dataset import ROLE_NAMES
from .sweep_plots import plot_heatmap, plot_sweep  # noqa: F401  (part of this module's interface)
from .theory import g_inv

if TYPE_CHECKING:  # names in annotations only
    from matplotlib.axes import Axes
    from matplotlib.contour import ContourSet
    from matplotlib.figure import Figure

    from .results import Result

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


def log_steps(steps: ArrayLike) -> np.ndarray:
    """Steps for a logarithmic axis: step 0 (the initial state) has no place
    there, so it becomes NaN and lines start at the first logged step >= 1."""
    steps = np.asarray(steps, dtype=float)
    return np.where(steps > 0, steps, np.nan)


def plot_sample_scores(
    ax: Axes,
    steps: ArrayLike,
    scores: np.ndarray,
    roles: np.ndarray | None = None,
    title: str = "",
    logx: bool = False,
    legend: bool = True,
    headroom: float = 0.0,
) -> None:
    """Every token's score of one sample against step.

    steps : (L,); scores : (L, T); roles : (T,) role codes or None.
    legend : a legend in the Axes (figures with many panels draw one legend for all instead).
    headroom : extra space above score 1, where a note can go without covering a curve.
    """
    seen = set()
    for t, (label, color) in enumerate(token_labels(roles, scores.shape[1])):
        lab = label if label not in seen else None
        seen.add(label)
        ax.plot(steps, scores[:, t], color=color, label=lab, lw=1.5 if label != "irrelevant" else 0.8)
    ax.set_ylim(-0.02, 1.02 + headroom)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_xlabel("step")
    ax.set_ylabel("attention score")
    if logx:
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(left=0)
    if title:
        ax.set_title(title, fontsize=10)
    if legend:
        ax.legend(fontsize=7, loc="center right")


def role_legend(fig: Figure, ax: Axes, rect_bottom: float = 0.06) -> tuple:
    """One legend of the token roles below every panel (from ``ax``'s lines);
    returns the tight_layout rect that leaves room for it."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    return (0, rect_bottom, 1, 1)


def label_contours(
    ax: Axes, cs: ContourSet, fmt: str, margin: tuple[float, float] = (0.02, 0.15), fontsize: float = 6
) -> None:
    """Label each contour line once, at the middle of its part that lies at least
    ``margin`` (fractions of the Axes' width and height) inside the edges, so no
    label is clipped; lines with no such part stay unlabelled."""
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    spots, levels = [], []
    for level, segs in zip(cs.levels, cs.allsegs):
        pts = [s for s in segs if len(s)]
        if not pts:
            continue
        pts = np.concatenate(pts)
        fx, fy = (pts[:, 0] - x0) / (x1 - x0), (pts[:, 1] - y0) / (y1 - y0)
        mx, my = margin
        inner = pts[(fx > mx) & (fx < 1 - mx) & (fy > my) & (fy < 1 - my)]
        if len(inner):
            spots.append(tuple(inner[len(inner) // 2]))
            levels.append(level)
    if spots:
        ax.clabel(cs, levels=levels, fontsize=fontsize, fmt=fmt, manual=spots)


def plot_example_scores(axes: Sequence[Axes], result: Result) -> None:
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


def plot_gaps(ax: Axes, result: Result) -> None:
    """Clean samples' relevant-token gaps and noisy samples' fitting gaps
    (effective gaps, group means) against the fitted g-law."""
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
                (tau[-1], law[-1]),
                fontsize=7,
                ha="right",
                va="bottom",
            )
    ax.axhline(np.log(m), color="0.7", lw=0.8)
    ax.set_xscale("symlog", linthresh=max(1, steps[1] if steps.size > 1 else 1))
    ax.set_xlim(left=0)
    ax.set_xlabel("step")
    ax.set_ylabel("logit gap")
    ax.legend(fontsize=7, loc="upper left")


def _on_axis(steps: np.ndarray, logx: bool) -> np.ndarray:
    """Which log points a step axis can show: on a log axis step 0 cannot be drawn."""
    return steps > 0 if logx else np.ones(steps.shape, bool)


def plot_run(axes: Sequence[Axes], result: Result) -> None:
    """A finished run on three Axes: the attention score on each role the data has
    (summed over the role's tokens; clean samples solid, noisy dashed), the losses,
    and the errors (the population error with bars of two standard errors; a zero
    error drawn on the bottom edge, marked)."""
    tr = result.trajectory
    steps = tr["step"]
    logx = result.config.get("log_scale") == "log"
    keep = _on_axis(steps, logx)
    x = steps[keep]
    ax = axes[0]
    counts = _role_counts(tr)
    for group, ls in (("clean", "-"), ("noisy", "--")):
        for role in ROLE_NAMES:
            key = f"score_{group}_{role}"
            if counts.get(role, 1) and key in tr and np.isfinite(tr[key][keep]).any():
                many = f" ({counts[role]} tokens)" if counts.get(role, 1) > 1 else ""
                ax.plot(x, tr[key][keep], ls=ls, color=ROLE_COLORS[role], label=f"{group}: {role}{many}")
    fresh = tr.get("pop_score_relevant")
    if fresh is not None and np.isfinite(np.asarray(fresh, dtype=float)[keep]).any():
        y = np.asarray(fresh, dtype=float)[keep]
        m = np.isfinite(y)  # at the population's log points only
        ax.plot(x[m], y[m], color="k", lw=1.6, label="fresh samples: relevant")
    ax.set_ylabel("score per role (summed over tokens)", fontsize=9)
    ax.set_ylim(-0.02, 1.02)
    _mark_times(axes, result.final, x)
    curves = {"train loss": "train_loss", "population loss": "pop_loss", "test loss": "test_loss"}
    _lines(axes[1], tr, keep, x, curves)
    axes[1].set_ylabel("loss")
    _plot_errors(axes[2], tr, keep, x)
    if "twin_train_loss" in tr:
        _plot_twin(axes, result, keep, x)
    for i, ax in enumerate(axes):
        ax.set_xlabel("step")
        if logx:
            ax.set_xscale("log")
            _few_log_ticks(ax)
        if not ax.get_legend_handles_labels()[0]:
            ax.text(0.5, 0.5, "nothing finite to draw", transform=ax.transAxes, ha="center", color="0.4")
        elif i == 0:  # eight curves: below the axes, never over them
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False)
        else:
            ax.legend(fontsize=7, loc="best")


# the event lines: black and grey dash-dots, a style no data curve uses
EVENT_STYLES = {"t_memorize": ("k", (0, (6, 2, 1, 2))), "t_select": ("0.4", (0, (1, 2)))}


def _few_log_ticks(ax: Axes) -> None:
    """At most six labelled decades on a log x axis (a run to 1e14 labels every decade otherwise,
    and at a talk's width the labels overprint)."""
    from matplotlib.ticker import LogLocator  # lazy: as matplotlib

    ax.xaxis.set_major_locator(LogLocator(base=10, numticks=6))


def _mark_times(axes: Sequence[Axes], final: Mapping[str, Any], x: np.ndarray) -> None:
    """The memorization and selection steps (``final``'s t_memorize, t_select) as vertical lines on
    every panel, when the run reached them."""
    marks = (("t_memorize", "memorized"), ("t_select", "relevant token selected on new samples"))
    for key, what in marks:
        t = final.get(key)
        if isinstance(t, (int, float)) and x.size and x.min() <= t <= x.max():
            color, ls = EVENT_STYLES[key]
            step = f"{int(t)}" if float(t).is_integer() and t < 1e6 else f"{t:.4g}"
            for i, ax in enumerate(axes):
                ax.axvline(t, color=color, lw=1.0, ls=ls, label=f"{what} (step {step})" if i == 0 else None)


def plot_groups(axes: Sequence[Axes], results: Sequence[Result], groups: Sequence[tuple]) -> None:
    """A model's own metrics against the step, one panel per (title, metric names, log y) group:
    a run's curves, or the mean over seeds with a band from the smallest to the largest."""
    for ax, (title, names, logy) in zip(axes, groups):
        for k, name in enumerate(names):
            rows = [np.asarray(r.trajectory[name], dtype=float) for r in results if name in r.trajectory]
            if not rows:
                continue
            step = np.asarray(results[0].trajectory["step"], dtype=float)
            Y = np.vstack([r[: step.size] for r in rows])
            ok = np.isfinite(Y).all(axis=0)
            ax.plot(
                step[ok],
                Y[:, ok].mean(axis=0),
                "o-" if ok.sum() < 30 else "-",
                ms=3,
                color=f"C{k}",
                label=name,
            )
            if len(rows) > 1:
                ax.fill_between(
                    step[ok], Y[:, ok].min(axis=0), Y[:, ok].max(axis=0), color=f"C{k}", alpha=0.2
                )
        ax.set_title(
            title + (f" ({len(results)} seeds: mean, min-max)" if len(results) > 1 else ""), fontsize=10
        )
        ax.set_xlabel("step")
        if logy:
            ax.set_yscale("log")
        ax.legend(fontsize=8)


def plot_seeds(axes: Sequence[Axes], results: Sequence[Result]) -> None:
    """The runs of an ``attnsim run --seeds`` folder on three Axes, one thin line per seed:
    the relevant token's score (clean samples solid, noisy dashed; fresh samples black),
    the training and population losses, and the population error."""
    panels = (
        (0, "score_clean_relevant", "C0", "-", "relevant (clean)"),
        (0, "score_noisy_relevant", "C0", "--", "relevant (noisy)"),
        (0, "pop_score_relevant", "k", "-", "relevant (fresh samples)"),
        (1, "train_loss", "C1", "-", "train loss"),
        (1, "pop_loss", "C4", "-", "population loss"),
        (2, "pop_error", "C3", "-", "population error"),
    )
    logx = results[0].config.get("log_scale") == "log"
    for k, res in enumerate(results):
        tr = res.trajectory
        keep = _on_axis(tr["step"], logx)
        x = tr["step"][keep]
        for i, key, color, ls, what in panels:
            if key in tr:
                y = np.asarray(tr[key], dtype=float)[keep]
                m = np.isfinite(y) & ((y > 0) if i == 2 else True)
                axes[i].plot(
                    x[m], y[m], color=color, ls=ls, lw=0.9, alpha=0.7, label=what if k == 0 else None
                )
    axes[0].set_ylabel("attention score on the relevant token", fontsize=9)
    axes[0].set_ylim(-0.02, 1.02)
    axes[1].set_ylabel("loss")
    axes[2].set_ylabel("population error (0 not drawn)")
    axes[2].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("step")
        if logx:
            ax.set_xscale("log")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best", title=f"{len(results)} seeds, one line each", title_fontsize=7)


def _plot_twin(axes: Sequence[Axes], result: Result, keep: np.ndarray, x: np.ndarray) -> None:
    """The precision twin beside the run (dotted, black), its first saturated step marked."""
    tr, pr = result.trajectory, result.precision or {}
    fmt = pr.get("dtype", "twin")
    pairs = (
        (0, "twin_score_clean_relevant", "relevant (clean)"),
        (0, "twin_score_noisy_relevant", "relevant (noisy)"),
        (1, "twin_train_loss", "train loss"),
        (1, "twin_pop_loss", "population loss"),
        (2, "twin_pop_error", "population error"),
    )
    for i, key, what in pairs:
        if key in tr:
            y = np.asarray(tr[key], dtype=float)[keep]
            m = np.isfinite(y) & ((y > 0) if i == 2 else True)
            if m.any():
                ls = "--" if "noisy" in key or "pop_loss" in key else ":"
                axes[i].plot(x[m], y[m], color="k", ls=ls, lw=1.2, label=f"{fmt} twin: {what}")
    sat = pr.get("first_saturated_step")
    if sat is not None and sat > 0:
        for ax in axes:
            ax.axvline(
                sat,
                color="0.5",
                lw=0.8,
                ls="-.",
                label=f"first score = 1 in {fmt}" if ax is axes[1] else None,
            )


def _role_counts(tr: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Tokens of each role per sample (from the first training sample's roles); {} if unknown."""
    roles = tr.get("roles")
    if roles is None or np.asarray(roles).ndim != 2 or not len(roles):
        return {}
    return {name: int(np.sum(np.asarray(roles)[0] == r)) for r, name in enumerate(ROLE_NAMES)}


def _plot_errors(ax: Axes, tr: Mapping[str, np.ndarray], keep: np.ndarray, x: np.ndarray) -> None:
    """Train, test and population errors on a log axis; zeros ride the bottom edge (marked
    with triangles) instead of leaving the axis; the population error with +-2 se bars."""
    curves = {}
    for name, key in (("train error", "train_acc"), ("test error", "test_acc")):
        if key in tr:
            curves[name] = 1.0 - np.asarray(tr[key], dtype=float)[keep]
    if "pop_error" in tr:
        curves["population error"] = np.asarray(tr["pop_error"], dtype=float)[keep]
    values = np.concatenate([y[np.isfinite(y)] for y in curves.values()] or [np.zeros(0)])
    positive = values[values > 0]
    floor = 10.0 ** np.floor(np.log10(positive.min()) - 0.5) if positive.size else 1e-3
    zeros = False
    for i, (label, y) in enumerate(curves.items()):
        m = np.isfinite(y)  # population metrics exist at their own log points only
        if not m.any():
            continue
        shown = np.where(y[m] > 0, y[m], floor)
        color = f"C{i}"
        ax.plot(x[m], shown, color=color, marker="." if m.sum() < 30 else None, label=label)
        z = y[m] <= 0
        if z.any():
            zeros = True
            if z.sum() <= 30:  # more would hide the line
                ax.plot(x[m][z], np.full(z.sum(), floor), "v", ms=3, color=color, clip_on=False)
        if label == "population error" and "pop_error_se" in tr:
            se = np.asarray(tr["pop_error_se"], dtype=float)[keep][m]
            ok = np.isfinite(se) & (y[m] > 0)
            lo = np.maximum(y[m][ok] - 2 * se[ok], floor)
            ax.fill_between(x[m][ok], lo, y[m][ok] + 2 * se[ok], color=color, alpha=0.25, lw=0)
            bars = [y[m][ok] - lo, 2 * se[ok]]
            ax.errorbar(x[m][ok], y[m][ok], yerr=bars, fmt="none", ecolor=color, lw=0.8)
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor)
    ax.set_ylabel("error (log; bars: 2 se" + ("; 0 on the bottom edge)" if zeros else ")"), fontsize=9)


def _lines(ax, tr: dict, keep: np.ndarray, x: np.ndarray, curves: dict) -> None:
    for i, (label, key) in enumerate(curves.items()):
        if key in tr:
            y = np.asarray(tr[key], dtype=float)[keep]
            m = np.isfinite(y)  # population metrics exist at their own log points only
            if m.any():
                ax.plot(x[m], y[m], color=f"C{i}", marker="." if m.sum() < 30 else None, label=label)
