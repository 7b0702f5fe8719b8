"""The figures the command line draws: ``attnsim run --plot`` of a run, and ``attnsim plot`` of a
run's folder, an ``--seeds`` folder or a sweep's (against one key, or a heatmap over two)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import registry
from ._meta import PlotError
from .report import _own_metrics
from .results import load, save_png
from .words import suggest

if TYPE_CHECKING:  # names in annotations only
    from .results import Result


def plot_result(res: Result, kind: str, path: Path) -> None:
    """The figure ``run --plot`` writes: the example samples' scores, or the gaps."""
    import matplotlib  # lazy: a run's summary needs no matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: after the backend is chosen

    from . import plotting  # lazy: as matplotlib

    c = res.config
    model = _own_metrics(c)
    if model is not None:  # no scores or gaps: its own metrics
        fig, axes = plt.subplots(1, 3, figsize=(13, 4.4))
        plotting.plot_groups(axes, [res], model.plot_groups)
        fig.suptitle(_setting(c), fontsize=10)
        fig.tight_layout()
        save_png(fig, path)
        return
    if kind == "scores":
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
        plotting.plot_example_scores(axes, res)
    else:
        fig, ax = plt.subplots(figsize=(7, 4))
        plotting.plot_gaps(ax, res)
    fig.suptitle(
        f"d={c['d']}, |mu|={c['signal_norm']:g}, lr={c['lr']:g}: regime {res.final['regime']}",
        fontsize=10,
    )
    fig.tight_layout()
    save_png(fig, path)


FIGURE_FORMATS = ("png", "pdf", "svg")  # what ``attnsim plot --out`` writes, by the name's suffix


def figure_format(out: str | Path) -> str:
    """The format a figure named ``out`` is written in (PlotError for another suffix)."""
    suffix = Path(out).suffix.lower().lstrip(".")
    if suffix not in FIGURE_FORMATS:
        raise PlotError(
            f"plot --out: {out}: write .{', .'.join(FIGURE_FORMATS)} (the suffix names the format)"
        )
    return suffix


def _sweep_axes(
    spec, table, metric: str | None, x: str | None, y: str | None = None
) -> tuple[str, str, list[str]]:
    """The metric, the x key and the keys that get one line per value (each checked); with
    ``y`` (a heatmap), the y key checked too and nothing else varied."""
    columns = [k for k in table if not k.startswith(("config.", "status", "error", "engine"))]
    metric = metric or ("pop_error" if "pop_error" in columns else "train_loss")
    if metric not in columns:
        dotted = [
            c for c in columns if c.rpartition(".")[2] == metric
        ]  # limit.relevant_prob for relevant_prob
        near = dotted[0] if dotted else suggest(metric, columns)
        hint = f"; did you mean {near!r}?" if near else f"; recorded: {', '.join(columns[:12])}, ..."
        raise PlotError(f"plot --metric: {metric!r} is not recorded{hint}")
    varied = [k for k, v in spec.grid.items() if len(v) > 1] or [k for p in spec.extra for k in p]
    varied = list(dict.fromkeys(varied))
    if x is None:
        if not varied:
            raise PlotError("plot: the sweep varies no config key; nothing to draw against")
        x = next((k for k in varied if k != y), varied[0])
    for flag, key in (("--x", x), ("--y", y)):
        if key is None:
            continue
        if f"config.{key}" not in table:
            raise PlotError(f"plot {flag}: {key!r} is not a config key of the sweep")
        if key not in varied:
            values = sorted({str(v) for v in table[f"config.{key}"]})
            raise PlotError(
                f"plot {flag}: the sweep does not vary {key} (every point has {key} = {', '.join(values)}); "
                f"it varies {', '.join(varied) or 'nothing'}"
            )
    if y == x:
        raise PlotError(f"plot --y: {y} is the x key too; give two different keys")
    by = [k for k in varied if k not in (x, y)]
    if y is not None and by:
        raise PlotError(
            f"plot --y: a heatmap holds two keys, and the sweep also varies {', '.join(by)}; "
            "draw it against --x alone (one line per value of the others)"
        )
    return metric, x, by


def _held_notes(folder: Path, held: dict) -> list[str]:
    """What the reader of a sweep's plot should know about the records it draws."""
    notes = []
    if held["damaged"]:
        notes.append(
            f"moved {len(held['damaged'])} damaged record(s) to {folder / 'records' / 'damaged'}; "
            f"not drawn: {', '.join(held['damaged'])}"
        )
    if held["records"] < held["points"]:
        notes.append(
            f"the sweep is unfinished: {held['records']} of {held['points']} runs have a record "
            "(rerun attnsim sweep to finish it)"
        )
    if held["failed"]:
        notes.append(f"{held['failed']} run(s) failed and are not drawn (see records.csv)")
    return notes


# the arrays a run's plot reads (a trajectory may hold large ones it never draws: scores, logits)
_PLOTTED = ("step", "roles", "train_", "test_", "pop_", "score_", "twin_", "fit_step")


def plot_folder(
    folder: Path,
    out: str | None,
    metric: str | None,
    x_key: str | None,
    logy: bool,
    y_key: str | None = None,
    logx: bool = False,
    logz: bool = False,
) -> tuple[Path, list[str]]:
    """A run's folder (result.json), an ``attnsim run --seeds`` folder (seed-K runs) or a
    sweep's (sweep.json) drawn into a figure (``out``, whose suffix names the format, or a
    PNG beside it); the path written and notes for the reader (records damaged, missing or
    failed, points not drawn). A sweep is drawn against one key (``x_key``), or as a heatmap over
    two (``y_key``; ``logz``: a log colour scale)."""
    from .results import _seed_runs  # lazy: as sweep_table
    from .sweep.tables import sweep_table  # lazy: a run's summary needs no sweep code (25 ms)

    seeds = _seed_runs(folder) if not (folder / "result.json").is_file() else []
    kind = "run" if (folder / "result.json").is_file() else "seeds" if seeds else "sweep"
    what = "a run's" if kind == "run" else "an --seeds"
    shaped = metric is not None or x_key is not None or y_key is not None or logy or logx or logz
    if kind != "sweep" and shaped:
        raise PlotError(
            f"plot: --metric, --x, --y, --logx, --logy and --logz shape a sweep's plot; this is {what} folder"
        )
    if logz and y_key is None:
        raise PlotError("plot --logz: a log colour scale is a heatmap's (give --y); a line plot takes --logy")
    if y_key is not None and (logx or logy):
        raise PlotError(
            "plot: a heatmap's cells are the grid's values in order, evenly spaced (a log grid looks "
            "logarithmic already); --logx and --logy draw lines only (--logz: a heatmap's log colours)"
        )
    fmt = figure_format(out) if out is not None else "png"
    notes: list[str] = []
    if kind != "sweep":  # ResultError before matplotlib loads
        own = set(registry.model_metrics())  # a model's own metrics (their trajectories)
        runs = [
            load(f, arrays=lambda k: k.startswith(_PLOTTED) or k in own)
            for f in ([folder] if kind == "run" else seeds)
        ]
    else:
        spec, table, held = sweep_table(folder)
        notes = _held_notes(folder, held)
        if held["records"] - held["failed"] == 0:
            raise PlotError(
                f"plot: {folder}: no run of the sweep has finished ({held['records']} record(s) of "
                f"{held['points']} runs, {held['failed']} failed); run attnsim sweep first"
            )
        metric, x, by = _sweep_axes(spec, table, metric, x_key, y_key)
    import matplotlib  # lazy: as in plot_result

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: after the backend is chosen

    from . import plotting  # lazy: as matplotlib

    if kind != "sweep":
        fig, axes = plt.subplots(1, 3, figsize=(13, 4.4))
        c, f = runs[0].config, runs[0].final
        model = _own_metrics(c)
        if model is not None:  # its own metrics, one panel per group
            plotting.plot_groups(axes, runs, model.plot_groups)
        elif kind == "run":
            plotting.plot_run(axes, runs[0])
        else:
            plotting.plot_seeds(axes, runs)
        what = "" if kind == "run" else f" ({len(runs)} seeds)"
        fig.suptitle(
            f"{folder.name}{what}: {_setting(c)}"
            + (f"; regime {f['regime']}" if kind == "run" and f.get("regime") else ""),
            fontsize=10,
        )
        path = Path(out) if out is not None else folder / "plot.png"
    else:
        fig, ax = plt.subplots(figsize=(7.2 if y_key else 6.5, 4.2))
        try:
            if y_key is not None:
                dropped = plotting.plot_heatmap(ax, table, metric, x, y_key, logz=logz)
            else:
                dropped = plotting.plot_sweep(ax, table, metric, x, by, logy=logy, logx=logx)
        except PlotError:
            plt.close(fig)
            raise
        done = f"{held['records'] - held['failed']} of {held['points']} runs"
        n_seeds = f"{len(spec.seeds)} seed(s), {done}"
        against = f"{x} and {y_key}" if y_key else x
        ax.set_title(f"sweep {spec.name}: {metric} against {against} ({n_seeds})", fontsize=9)
        if dropped:
            notes.append(dropped)
        name = (
            f"{metric}-vs-{x}"
            + (f"-{y_key}" if y_key else "")
            + ("-logx" if logx else "")
            + ("-logy" if logy else "")
            + ("-logz" if logz else "")
        )
        path = Path(out) if out is not None else folder / f"{name}.png"
    fig.tight_layout()
    save_png(fig, path, fmt=fmt)
    return path, notes


def _setting(c: dict) -> str:
    """A run's setting in the paper's symbols, for a title (keys a damaged file lacks left out)."""
    if _own_metrics(c) is not None:
        return f"model={c['model']}, n={c.get('n')}, d={c.get('d')}, T={c.get('T')}"
    parts = [
        ("n", "n", "{}"),
        ("d", "d", "{}"),
        ("signal_norm", r"$\|\mu\|$", "{:g}"),
        ("noise_rate", r"$\eta$", "{:g}"),
    ]
    return ", ".join(
        f"{sym}={fmt.format(c[k])}" for k, sym, fmt in parts if isinstance(c.get(k), (int, float))
    )
