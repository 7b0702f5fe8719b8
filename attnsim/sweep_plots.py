"""Drawing a sweep's records on given Axes: a metric against one key, grouped by others (means
with their spread, or the fraction of each regime), and a heatmap over two keys. Nothing here
creates or saves a figure (:mod:`attnsim.plotting` re-exports these)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ._meta import PlotError

if TYPE_CHECKING:  # names in annotations only
    from matplotlib.axes import Axes


def plot_sweep(
    ax: Axes,
    table: Mapping[str, Any],
    metric: str,
    x: str,
    by: list[str] | None = None,
    logy: bool = False,
    logx: bool = False,
) -> str | None:
    """A recorded metric of a sweep against one config key: one line per value
    of the other keys ``by``, the mean over seeds with a band from the smallest
    to the largest seed's value; a metric that is a word (``regime``) as the
    fraction of seeds with each value; a key whose values are words (``model``,
    ``precision_twin``) as categories in the order met. ``table``:
    :func:`attnsim.sweep.load_sweep`. PlotError when no point has a value to draw.
    Returns a note on the points not drawn (None: every point drawn)."""
    col = {k: np.asarray(table[k]) for k in table}
    ok = col["status"] == "ok"
    xs, categories = _positions(col[f"config.{x}"][ok])
    if logx and (categories or not (xs > 0).all()):
        why = "its values are words" if categories else "it has values <= 0"
        raise PlotError(f"plot --logx: {x} cannot be drawn on a log axis ({why}); draw it without --logx")
    raw = col[metric][ok]
    groups = [tuple(row) for row in zip(*(col[f"config.{k}"][ok] for k in by or []))] or [()] * xs.size
    words = [v for v in raw if isinstance(v, str)]
    note = None
    if words:
        _plot_fractions(ax, xs, raw, groups, by or [], metric)
    else:
        note = _plot_means(ax, xs, raw, groups, by or [], metric, logy)
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
    return _mark_dropped(ax, note)


def _dropped(metric: str, ys: np.ndarray, log: bool) -> str | None:
    """Words for the runs whose ``metric`` is not drawn: null (the event did not happen within
    the run, or the value is unresolved) or, on a log scale, <= 0; None when every run is drawn."""
    null = int((~np.isfinite(ys)).sum())
    nonpositive = int((np.isfinite(ys) & (ys <= 0)).sum()) if log else 0
    if not null and not nonpositive:
        return None
    parts = [f"{null} null (not reached within the run, or no value)"] if null else []
    parts += [f"{nonpositive} <= 0 (no place on a log scale)"] if nonpositive else []
    return f"{null + nonpositive} of {ys.size} runs not drawn: {metric} " + ", ".join(parts)


def _mark_dropped(ax: Axes, note: str | None) -> str | None:
    """The note on the plot itself (under the axes), and returned for stderr."""
    if note:
        ax.annotate(note, (0.0, -0.2), xycoords="axes fraction", fontsize=7, color="0.3", va="top")
    return note


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
    if logy:
        ys = np.where(ys > 0, ys, np.nan)
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
    ax.set_ylabel(f"{metric} (mean over seeds; band: their range)", fontsize=9)
    if logy:
        ax.set_yscale("log")
    if by:
        ax.legend(fontsize=7, loc="best")
    raw_ys = np.array([np.nan if v is None else v for v in raw], dtype=float)
    return _dropped(metric, raw_ys, logy)


def plot_heatmap(
    ax: Axes, table: Mapping[str, Any], metric: str, x: str, y: str, logz: bool = False
) -> str | None:
    """A 2-D sweep as a map over two config keys, one cell per pair of grid values (in the
    grid's order, evenly spaced, labelled with the values): each cell the mean of
    ``metric`` over its seeds (a colour bar beside, logarithmic with ``logz``), or for a
    word-valued metric (``regime``) the value most seeds have, one colour per word (a legend;
    cells where the seeds disagree hatched). Returns a note on the runs not drawn (None: all)."""
    col = {k: np.asarray(table[k]) for k in table}
    ok = col["status"] == "ok"
    xs, xcat = _positions(col[f"config.{x}"][ok])
    ys, ycat = _positions(col[f"config.{y}"][ok])
    raw = col[metric][ok]
    gx, gy = np.unique(xs), np.unique(ys)
    cells = [[raw[(xs == u) & (ys == v)] for u in gx] for v in gy]
    words = sorted({v for v in raw if isinstance(v, str)})
    edges_x, edges_y = np.arange(gx.size + 1) - 0.5, np.arange(gy.size + 1) - 0.5
    if words and logz:
        raise PlotError(f"plot --logz: {metric} is a word per run (a category per colour), not a number")
    note = None
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
        values = np.array([np.nan if v is None else v for v in raw], dtype=float)
        note = _dropped(metric, values, logz)
        keep = (lambda c: np.where(c > 0, c, np.nan)) if logz else (lambda c: c)
        num = [[keep(np.array([np.nan if v is None else v for v in c], dtype=float)) for c in row]
               for row in cells]  # fmt: skip
        grid = np.array([[np.nanmean(c) if np.isfinite(c).any() else np.nan for c in row] for row in num])
        if not np.isfinite(grid).any():
            what = "a positive value" if logz else "a value"
            raise PlotError(f"plot --metric {metric}: no finished point of the sweep has {what}")
        norm = None
        if logz:
            import matplotlib.colors as mcolors  # lazy: as matplotlib

            norm = mcolors.LogNorm(vmin=np.nanmin(grid), vmax=np.nanmax(grid))
        mesh = ax.pcolormesh(edges_x, edges_y, np.ma.masked_invalid(grid), cmap="viridis", norm=norm)
        scale = ", log scale" if logz else ""
        ax.figure.colorbar(mesh, ax=ax, label=f"{metric} (mean over seeds{scale}; blank: not drawn)")
    ax.set_xticks(range(gx.size), xcat or [f"{v:g}" for v in gx])
    ax.set_yticks(range(gy.size), ycat or [f"{v:g}" for v in gy])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    return _mark_dropped(ax, note)


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
