"""Drawing on given Axes. Nothing here creates or saves a figure."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from ._meta import PlotError
from .data.dataset import ROLE_NAMES
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
    ax.set_ylabel("attention score per role (summed over its tokens)", fontsize=9)
    ax.set_ylim(-0.02, 1.02)
    _mark_times(axes, result.theory, x)
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
        if not ax.get_legend_handles_labels()[0]:
            ax.text(0.5, 0.5, "nothing finite to draw", transform=ax.transAxes, ha="center", color="0.4")
        elif i == 0:  # eight curves: below the axes, never over them
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False)
        else:
            ax.legend(fontsize=7, loc="best")


def _mark_times(axes: Sequence[Axes], theory: Mapping[str, Any], x: np.ndarray) -> None:
    """The memorization and generalization steps (the theory section's t_memorize,
    t_generalize) as vertical lines on every panel, when the run reached them."""
    marks = (("t_memorize", "memorized", "C3"), ("t_generalize", "new samples: relevant score >= 0.5", "C2"))
    for key, what, color in marks:
        t = theory.get(key)
        if isinstance(t, (int, float)) and x.size and x.min() <= t <= x.max():
            for i, ax in enumerate(axes):
                ax.axvline(
                    t, color=color, lw=0.9, ls=(0, (4, 2)), label=f"{what} (step {t:.4g})" if i == 0 else None
                )


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


def plot_sweep(
    ax: Axes,
    table: Mapping[str, Any],
    metric: str,
    x: str,
    by: list[str] | None = None,
    logy: bool = False,
    logx: bool = False,
) -> None:
    """A recorded metric of a sweep against one config key: one line per value
    of the other keys ``by``, the mean over seeds with a band from the smallest
    to the largest seed's value; a metric that is a word (``regime``) as the
    fraction of seeds with each value; a key whose values are words (``model``,
    ``precision_twin``) as categories in the order met. ``table``:
    :func:`attnsim.sweep.load_sweep`. PlotError when no point has a value to draw."""
    col = {k: np.asarray(table[k]) for k in table}
    ok = col["status"] == "ok"
    xs, categories = _positions(col[f"config.{x}"][ok])
    if logx and (categories or not (xs > 0).all()):
        why = "its values are words" if categories else "it has values <= 0"
        raise PlotError(f"plot --logx: {x} cannot be drawn on a log axis ({why}); draw it without --logx")
    raw = col[metric][ok]
    groups = [tuple(row) for row in zip(*(col[f"config.{k}"][ok] for k in by or []))] or [()] * xs.size
    words = [v for v in raw if isinstance(v, str)]
    if words:
        _plot_fractions(ax, xs, raw, groups, by or [], metric)
    else:
        _plot_means(ax, xs, raw, groups, by or [], metric, logy)
    ax.set_xlabel(x)
    if categories:
        ax.set_xticks(range(len(categories)), categories)
        ax.set_xlim(-0.5, len(categories) - 0.5)
    if logx:
        ax.set_xscale("log")
        values = np.unique(xs)
        if values.size <= 12:  # a short grid: its own values as the ticks (no crowded minor labels)
            ax.set_xticks(values, [f"{v:g}" for v in values])
            ax.minorticks_off()


def _positions(values: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """x positions of a config key's values: the numbers themselves, or for words (and
    booleans) 0, 1, ... in the order met, with the words as the second element."""
    if all(isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_)) for v in values):
        return values.astype(float), []
    categories = list(dict.fromkeys(str(v).lower() if isinstance(v, bool) else str(v) for v in values))
    index = {c: i for i, c in enumerate(categories)}
    pos = [index[str(v).lower() if isinstance(v, bool) else str(v)] for v in values]
    return np.asarray(pos, dtype=float), categories


def _plot_means(ax, xs, raw, groups, by, metric, logy) -> None:
    ys = np.array([np.nan if v is None else v for v in raw], dtype=float)
    finite = np.isfinite(ys)
    if not finite.any():
        raise PlotError(f"plot --metric {metric}: no finished point of the sweep has a value (all null)")
    if logy and not (ys[finite] > 0).any():
        raise PlotError(f"plot --logy: no point has a positive {metric}; draw it without --logy")
    for i, g in enumerate(dict.fromkeys(groups)):
        sel = np.array([h == g for h in groups])
        grid = np.unique(xs[sel])
        stats = [ys[sel][xs[sel] == v] for v in grid]
        mean = np.array([np.nanmean(s) if np.isfinite(s).any() else np.nan for s in stats])
        lo = np.array([np.nanmin(s) if np.isfinite(s).any() else np.nan for s in stats])
        hi = np.array([np.nanmax(s) if np.isfinite(s).any() else np.nan for s in stats])
        ax.plot(grid, mean, marker="o", ms=3, color=f"C{i % 10}", label=_group_label(by, g) or None)
        if max(len(s) for s in stats) > 1:
            ax.fill_between(grid, lo, hi, color=f"C{i % 10}", alpha=0.2)
    zero = " (0 not drawn)" if logy and (ys[finite] <= 0).any() else ""
    ax.set_ylabel(f"{metric} (mean over seeds; band: their range){zero}", fontsize=9)
    if logy:
        ax.set_yscale("log")
    if by:
        ax.legend(fontsize=7, loc="best")


def plot_heatmap(ax: Axes, table: Mapping[str, Any], metric: str, x: str, y: str) -> None:
    """A 2-D sweep as a map over two config keys, one cell per pair of grid values (in the
    grid's order, evenly spaced, labelled with the values): each cell the mean of
    ``metric`` over its seeds (a colour bar beside), or for a word-valued metric
    (``regime``) the value most seeds have, one colour per word (a legend; cells where the
    seeds disagree hatched)."""
    col = {k: np.asarray(table[k]) for k in table}
    ok = col["status"] == "ok"
    xs, xcat = _positions(col[f"config.{x}"][ok])
    ys, ycat = _positions(col[f"config.{y}"][ok])
    raw = col[metric][ok]
    gx, gy = np.unique(xs), np.unique(ys)
    cells = [[raw[(xs == u) & (ys == v)] for u in gx] for v in gy]
    words = sorted({v for v in raw if isinstance(v, str)})
    edges_x, edges_y = np.arange(gx.size + 1) - 0.5, np.arange(gy.size + 1) - 0.5
    if words:
        grid = np.full((gy.size, gx.size), np.nan)
        split = []
        for i, row in enumerate(cells):
            for j, vals in enumerate(row):
                got = [v for v in vals if isinstance(v, str)]
                if got:
                    top = max(words, key=got.count)
                    grid[i, j] = words.index(top)
                    if got.count(top) < len(got):
                        split.append((i, j))
        import matplotlib.colors as mcolors  # lazy: as matplotlib

        cmap = mcolors.ListedColormap([f"C{k % 10}" for k in range(len(words))])
        ax.pcolormesh(
            edges_x, edges_y, np.ma.masked_invalid(grid), cmap=cmap, vmin=-0.5, vmax=len(words) - 0.5
        )
        for i, j in split:
            ax.fill_between([j - 0.5, j + 0.5], i - 0.5, i + 0.5, hatch="//", fc="none", ec="k", lw=0)
        handles = [ax.fill_between([], [], [], color=f"C{k % 10}", label=w) for k, w in enumerate(words)]
        if split:
            handles.append(ax.fill_between([], [], [], hatch="//", fc="none", ec="k", label="seeds disagree"))
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title=metric)
    else:
        num = [[np.array([np.nan if v is None else v for v in c], dtype=float) for c in row] for row in cells]
        grid = np.array([[np.nanmean(c) if np.isfinite(c).any() else np.nan for c in row] for row in num])
        if not np.isfinite(grid).any():
            raise PlotError(f"plot --metric {metric}: no finished point of the sweep has a value (all null)")
        mesh = ax.pcolormesh(edges_x, edges_y, np.ma.masked_invalid(grid), cmap="viridis")
        ax.figure.colorbar(mesh, ax=ax, label=f"{metric} (mean over seeds)")
    ax.set_xticks(range(gx.size), xcat or [f"{v:g}" for v in gx])
    ax.set_yticks(range(gy.size), ycat or [f"{v:g}" for v in gy])
    ax.set_xlabel(x)
    ax.set_ylabel(y)


def _group_label(by: list[str], g: tuple) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in zip(by, g))


def _plot_fractions(ax, xs, raw, groups, by, metric) -> None:
    """A word-valued metric: for each value (a colour), the fraction of seeds that have
    it, one line style per group."""
    values = sorted({v for v in raw if isinstance(v, str)})
    styles = ["-", "--", ":", "-."]
    for i, g in enumerate(dict.fromkeys(groups)):
        sel = np.array([h == g for h in groups])
        grid = np.unique(xs[sel])
        for j, word in enumerate(values):
            frac = [np.mean([v == word for v in raw[sel][xs[sel] == u]]) for u in grid]
            label = ", ".join(filter(None, [_group_label(by, g), f"{metric} = {word}"]))
            ax.plot(grid, frac, marker="o", ms=3, color=f"C{j % 10}", ls=styles[i % 4], label=label)
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel(f"fraction of seeds with each {metric}", fontsize=9)
    ax.legend(fontsize=7, loc="best")


# -- theory boundaries on phase diagrams ---------------------------------------------


def boundary_points(
    boundary: Callable[[np.ndarray], np.ndarray] | str | Path, along: ArrayLike, independent: str = "x"
) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) points of a boundary: a function of one axis evaluated ``along``
    it (``independent``: which axis ``along`` is on; the function returns the
    other), or a CSV file of x, y points (a header line allowed), as groups
    publishing exact-asymptotics curves give them."""
    if callable(boundary):
        t = np.asarray(along, dtype=float)
        other = np.asarray(boundary(t), dtype=float)
        return (t, other) if independent == "x" else (other, t)
    try:
        pts = np.loadtxt(boundary, delimiter=",", ndmin=2, comments="#", skiprows=_header_rows(boundary))
    except (OSError, ValueError) as exc:
        raise PlotError(f"boundary: {boundary}: not a CSV of x, y points ({exc})") from None
    if pts.shape[1] != 2:
        raise PlotError(f"boundary: {boundary}: needs two columns (x, y), has {pts.shape[1]}")
    return pts[:, 0], pts[:, 1]


def _header_rows(path: str | Path) -> int:
    with open(path) as fh:
        first = fh.readline().split(",")[0].strip()
    try:
        float(first)
    except ValueError:
        return 1
    return 0


def draw_boundary(
    ax: Axes,
    boundary: Callable[[np.ndarray], np.ndarray] | str | Path,
    along: ArrayLike = (),
    independent: str = "x",
    **style: Any,
) -> None:
    """Draw a theory boundary (see :func:`boundary_points`) on a phase diagram,
    keeping the axes' limits; ``style`` goes to ``ax.plot`` (label, colour, ...)."""
    x, y = boundary_points(boundary, along, independent)
    lims = ax.get_xlim(), ax.get_ylim()
    ax.plot(x, y, **{"color": "w", "ls": "--", "lw": 1.5, **style})
    ax.set_xlim(*lims[0])
    ax.set_ylim(*lims[1])


def cell_edges(v: ArrayLike) -> np.ndarray:
    """Cell edges (len + 1) of geometrically spaced cell centres, for pcolormesh on log axes."""
    lv = np.log(np.asarray(v, dtype=float))
    mid = (lv[1:] + lv[:-1]) / 2
    return np.exp(np.concatenate([[2 * lv[0] - mid[0]], mid, [2 * lv[-1] - mid[-1]]]))


def boundary_crossings(
    ns: ArrayLike, snr: ArrayLike, good: np.ndarray, edge: str = "lower"
) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a phase diagram (one n, SNR increasing) the crossing into the
    ``good`` cells (``edge = "upper"``: out of them, after the last good cell),
    half-way (geometrically) between the cells on either side: (the n values
    with a crossing, their crossing SNRs)."""
    ns, snr = np.asarray(ns, dtype=float), np.asarray(snr, dtype=float)
    rows, cross = [], []
    for i, n in enumerate(ns):
        hit = np.flatnonzero(np.asarray(good[i], dtype=bool))
        if not hit.size:
            continue
        j = hit[0] - 1 if edge == "lower" else hit[-1]
        if 0 <= j < snr.size - 1:
            rows.append(n)
            cross.append(np.sqrt(snr[j] * snr[j + 1]))
    return np.array(rows), np.array(cross)


def fit_power_boundary(
    ns: ArrayLike, snr: ArrayLike, good: np.ndarray, power: float, edge: str = "lower"
) -> float:
    """c of the boundary SNR = c n^power fitted to a phase diagram: the median
    of crossing * n^-power over the rows' crossings (:func:`boundary_crossings`;
    NaN without any). n SNR^2 = c and SNR sqrt(n) = c are one family (power -1/2)."""
    rows, cross = boundary_crossings(ns, snr, good, edge)
    return float(np.median(cross * rows ** (-power))) if rows.size else float("nan")


def interpolated_crossings(
    rows: ArrayLike, x: ArrayLike, score: np.ndarray, edge: str = "lower"
) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a phase diagram (x increasing) where ``score`` (rows, x)
    crosses 0 at the edge of its good cells (score >= 0): ``lower``, into the
    first good cell; ``upper``, out of the last one. The crossing is
    interpolated linearly in score and log x between the two cells, so an edge
    moves continuously with the data instead of by whole cells (score: a
    log error ratio, a fraction minus one half, ...). Rows without a crossing
    inside the grid are left out: (the rows with one, their crossing x)."""
    rows, lx = np.asarray(rows, dtype=float), np.log(np.asarray(x, dtype=float))
    score = np.asarray(score, dtype=float)
    out_rows, cross = [], []
    for i, row in enumerate(rows):
        good = np.flatnonzero(score[i] >= 0)
        if not good.size:
            continue
        j = good[0] - 1 if edge == "lower" else good[-1]
        if not 0 <= j < lx.size - 1 or not np.all(np.isfinite(score[i, j : j + 2])):
            continue
        s0, s1 = score[i, j], score[i, j + 1]
        t = s0 / (s0 - s1) if s0 != s1 else 0.5
        out_rows.append(row)
        cross.append(float(np.exp(lx[j] + t * (lx[j + 1] - lx[j]))))
    return np.array(out_rows), np.array(cross)


def fit_power_law(rows: ArrayLike, cross: ArrayLike, power: float | None = None) -> dict:
    """A boundary cross = c rows^b fitted to crossings by least squares in logs.

    With ``power`` the exponent is held there and only c is fitted (its
    geometric-mean value); without, b is free too, with its standard error
    from the residuals (three crossings at least; with two the line passes
    through them and b has no error, with one there is no exponent). Returns
    ``c``, ``b``, ``b_se``, ``rms`` (residuals in decades) and ``points``."""
    r, c = np.log(np.asarray(rows, dtype=float)), np.log(np.asarray(cross, dtype=float))
    n = r.size
    out = {"c": float("nan"), "b": float("nan"), "b_se": float("nan"), "rms": float("nan"), "points": int(n)}
    if n == 0:
        return out
    if power is not None or n == 1:
        b = float(power) if power is not None else float("nan")
        a = float(np.mean(c - (b if power is not None else 0.0) * r))
        resid = c - a - (b * r if power is not None else 0.0)
    else:
        b, a = np.polyfit(r, c, 1)
        resid = c - a - b * r
        if n > 2:
            out["b_se"] = float(np.sqrt(np.sum(resid**2) / (n - 2) / np.sum((r - r.mean()) ** 2)))
    out.update(c=float(np.exp(a)), b=float(b), rms=float(np.sqrt(np.mean(resid**2)) / np.log(10)))
    return out


def describe_fit(fit: dict, what: str = "n") -> str:
    """One line for a numbers file: the fitted form with what its data carry."""
    if fit["points"] == 0:
        return "no crossing inside the grid"
    if fit["points"] == 1:
        return f"c = {fit['c']:.3g} (a constant fitted at one point: it cannot test the form)"
    exp = f"{what}^{fit['b']:.3g}" + (f" +- {fit['b_se']:.2g}" if np.isfinite(fit["b_se"]) else "")
    return f"c = {fit['c']:.3g}, {exp}, rms residual {fit['rms']:.2g} decades over {fit['points']} crossings"
