"""Every figure in --quick mode, into a temporary folder; and the CLI entry."""

import importlib

import pytest

from attnsim.cli import main
from attnsim.cli_args import load_gallery

GALLERY = load_gallery()  # scripts/gallery of this checkout
NAMES, make = GALLERY.NAMES, GALLERY.make


@pytest.fixture(scope="session")
def figure_cache(tmp_path_factory):
    """One sweep cache for the quick figures (a figure that reads another's sweeps, as figure 13
    reads 6, 15 and 16's, finds them there): they run on one worker (setup.cfg's --dist loadfile)."""
    return tmp_path_factory.mktemp("figure-cache")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(NAMES))
def test_figure_quick_smoke(name, tmp_path, monkeypatch, figure_cache):
    """Every figure in quick mode: its PNGs and numbers file, the cache reused (the figure's
    sweeps again: nothing in the cache written anew), and (for the figures in LAYOUT) the
    layout checks on each figure as it is saved. The figures share one cache, as
    ``attnsim figures`` does."""
    import importlib

    mod = importlib.import_module(f"gallery.{NAMES[name]}")
    real_save = mod.save

    def checked(fig, path, *args, **kwargs):
        if name in LAYOUT:
            fig.canvas.draw()
            _check_layout(name, fig, name in NOTES_CLEAR)
        return real_save(fig, path, *args, **kwargs)

    monkeypatch.setattr(mod, "save", checked)
    paths = make([name], outdir=tmp_path / "figs", quick=True, cache=figure_cache, log=lambda *_: None)
    pngs = [p for p in paths if p.suffix == ".png"]
    assert pngs and all(p.stat().st_size > 10_000 for p in pngs)
    numbers = [p for p in paths if p.suffix == ".txt"]  # the numbers docs/figures.md quotes
    assert len(numbers) == 1 and numbers[0].read_text().strip()
    cached = _files(figure_cache)
    assert GALLERY.sweeps_only([name], quick=True, cache=figure_cache) == []
    assert _files(figure_cache) == cached  # cached sweep records are reused


def _files(folder) -> dict:
    """Every file under ``folder`` with its contents, and a record's time of last change (a sweep
    rewrites its summaries, the same, each time it ends)."""
    return {
        p: (p.read_bytes(), p.stat().st_mtime_ns if "records" in p.parent.name else 0)
        for p in folder.rglob("*")
        if p.is_file()
    }


def test_a_figure_made_again_reads_its_cache_and_draws_the_same_files(tmp_path):
    paths = make(
        ["dynamics"], outdir=tmp_path / "figs", quick=True, cache=tmp_path / "cache", log=lambda *_: None
    )
    cached = _files(tmp_path / "cache")
    again = make(
        ["dynamics"], outdir=tmp_path / "figs", quick=True, cache=tmp_path / "cache", log=lambda *_: None
    )
    assert again == paths and _files(tmp_path / "cache") == cached


def test_figures_cli_rejects_unknown_names(capsys):
    assert main(["figures", "nope"]) == 2
    assert "unknown figure" in capsys.readouterr().err


def test_figures_cli_writes_quick_dynamics(tmp_path):
    assert (
        main(["figures", "dynamics", "--quick", "--outdir", str(tmp_path), "--cache", str(tmp_path / "c")])
        == 0
    )
    assert (tmp_path / "fig2_dynamics.png").exists()


@pytest.mark.slow
def test_figure_script_runs_with_spawned_workers(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "fig6_phase.py"
    args = [sys.executable, str(script), "--quick", "--outdir", str(tmp_path), "--cache", str(tmp_path / "c")]
    out = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "fig6_phase.png").exists()


def test_every_figure_lists_the_sweeps_it_reads_and_they_parse_full_size():
    """make() runs the sweeps a module lists before drawing it, and its make() only reads their
    records: a module that reads records must list them (``sweeps``), and every sweep of every
    figure, full size, must parse, each point checked (the figure command would refuse it)."""
    import importlib
    import inspect

    from attnsim.sweep import parse_sweep

    for module in NAMES.values():
        mod = importlib.import_module(f"gallery.{module}")
        src = inspect.getsource(mod)
        reads = any(c in src for c in ("records_of(", "records(quick", "encoder_records(", ".records("))
        assert hasattr(mod, "sweeps") == reads, module
        for quick in (True, False):
            for mapping in getattr(mod, "sweeps", lambda q: [])(quick):
                assert parse_sweep(mapping).points(), (module, quick)


def _figures_of(name, tmp_path, monkeypatch):
    """The matplotlib figures a quick run of figure ``name`` saves, drawn and kept open.
    With ATTNSIM_LAYOUT_CACHE set to a figure cache (``sweeps/figures`` after
    ``attnsim figures``), the full-size figures from it instead: some layout faults
    (a clipped contour label, crowded ticks) show only on the full grids."""
    import importlib
    import os

    made = []
    mod = importlib.import_module(f"gallery.{NAMES[name]}")

    def keep(fig, path, dpi=110):
        fig.canvas.draw()
        made.append(fig)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        return path

    monkeypatch.setattr(mod, "save", keep)
    full = os.environ.get("ATTNSIM_LAYOUT_CACHE")
    cache = full or tmp_path / "cache"
    make([name], outdir=tmp_path / "figs", quick=not full, cache=cache, log=lambda *_: None)
    return made


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _line_points(ax):
    import numpy as np

    for line in ax.get_lines():
        xy = np.column_stack([line.get_xdata(orig=False), line.get_ydata(orig=False)]).astype(float)
        xy = xy[np.isfinite(xy).all(axis=1)]
        if len(xy) and line.get_visible():
            yield line, line.get_transform().transform(xy)


def _check_layout(name, fig, notes_clear: bool) -> None:
    """Layout faults of one drawn figure (see test_figure_layout_is_readable)."""
    import numpy as np

    r = fig.canvas.get_renderer()
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    titles = [ax.title.get_window_extent(r) for ax in axes if ax.get_title()]
    for i, a in enumerate(titles):  # titles of different panels never run into each other
        assert not any(_overlap(a, b) for b in titles[i + 1 :]), f"{name}: overlapping titles"
    for ax in axes:
        box = ax.get_window_extent(r)
        texts = [ax.title, *ax.texts] + ([fig._suptitle] if fig._suptitle else [])
        assert not any("frakS" in t.get_text() for t in texts), f"{name}: {ax.get_title()}"  # TeX, not text
        for t in ax.texts:  # contour labels and notes lie inside their Axes
            e = t.get_window_extent(r)
            assert box.x0 - 1 <= e.x0 and e.x1 <= box.x1 + 1 and box.y0 - 1 <= e.y0 and e.y1 <= box.y1 + 1, (
                f"{name}: {t.get_text()!r} clipped"
            )
        ticks = [t.get_window_extent(r) for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
        for i, a in enumerate(ticks):
            assert not any(_overlap(a, b) for b in ticks[i + 1 :]), f"{name}: x tick labels run together"
        if ax.get_xscale() == "log" and "step" in ax.get_xlabel().lower():  # a log axis of steps
            for line in ax.get_lines():
                if line.get_transform() is not ax.transData:
                    continue  # axhline: x in Axes coordinates
                x = np.asarray(line.get_xdata(), dtype=float)
                x = x[np.isfinite(x)]
                assert not (x.size and x.min() < 1), f"{name}: a point at step {x.min()} on a log axis"
        if notes_clear:
            covers = [t.get_window_extent(r) for t in ax.texts]
            if ax.get_legend() is not None:
                covers.append(ax.get_legend().get_window_extent(r))
            for c in covers:
                for line, pts in _line_points(ax):
                    inside = (pts[:, 0] > c.x0) & (pts[:, 0] < c.x1) & (pts[:, 1] > c.y0) & (pts[:, 1] < c.y1)
                    assert not inside.any(), f"{name}: a legend or note covers {line.get_label()!r}"


LAYOUT = [
    "dynamics",
    "heatmaps",
    "frak_s",
    "delayed",
    "phase",
    "limit",
    "encoder_dynamics",
    "encoder_heatmaps",
    "real",
]
NOTES_CLEAR = {"dynamics", "encoder_dynamics", "real"}  # panels whose legend and notes must not cover a curve


@pytest.mark.slow
def test_figure_layout_is_readable_at_full_size(tmp_path, monkeypatch):
    """What makes a figure hard to read, checked on the drawn figure: labels
    clipped by their Axes, tick labels or titles running into each other,
    legends and notes over curves, step 0 drawn on a log axis, raw TeX names.
    On the full-size figures of a figure cache (ATTNSIM_LAYOUT_CACHE: ``sweeps/figures``
    after ``attnsim figures``); the quick figures get the same checks in
    test_figure_quick_smoke, which draws them anyway."""
    import os

    if not os.environ.get("ATTNSIM_LAYOUT_CACHE"):
        pytest.skip("full-size layout needs ATTNSIM_LAYOUT_CACHE; quick mode: test_figure_quick_smoke")
    for name in LAYOUT:
        if name == "real":
            pytest.importorskip("sklearn")
        for fig in _figures_of(name, tmp_path / name, monkeypatch):
            _check_layout(name, fig, name in NOTES_CLEAR)


PLOT_KINDS = {  # attnsim plot on folders of each kind: (run keys or sweep grid, plot flags)
    "run": ({"steps": 300}, []),
    "run-log": ({"steps": 2000, "log_scale": "log", "log_points": 40}, []),
    "run-magen": ({"preset": "magen2025", "steps": 200}, []),
    "run-clean": ({"steps": 200, "noise_rate": 0.0}, []),
    "sweep": ({"signal_norm": [2.0, 5.0, 9.0], "d": [60, 120]}, []),
    "sweep-regime": ({"signal_norm": [2.0, 5.0, 9.0]}, ["--metric", "regime"]),
    "sweep-logy": ({"signal_norm": [2.0, 5.0, 9.0]}, ["--logy"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(PLOT_KINDS))
def test_attnsim_plot_layout_is_readable(kind, tmp_path, monkeypatch):
    """Every kind of ``attnsim plot`` under the figure layout checks; run plots keep
    their legends off the curves."""
    import attnsim.report_figures
    from attnsim.cli import main

    keys, flags = PLOT_KINDS[kind]
    made = []

    def keep(fig, path, dpi=110, fmt="png"):
        fig.canvas.draw()
        made.append(fig)
        return path

    monkeypatch.setattr(attnsim.report_figures, "save_png", keep)
    folder = tmp_path / kind
    if kind.startswith("run"):
        preset = ["--preset", keys.pop("preset")] if "preset" in keys else []
        sets = [a for k, v in keys.items() for a in ("--set", f"{k}={v}")]
        assert main(["run", *preset, *sets, "--out", str(folder)]) == 0
    else:
        toml = tmp_path / "s.toml"
        grid = "\n".join(f"{k} = {v}" for k, v in keys.items())
        toml.write_text(
            f'[sweep]\nname = "{kind}"\nseeds = 2\n[base]\nn = 6\nT = 5\nsteps = 200\n'
            f"pop_points = 256\n[grid]\n{grid}\n"
        )
        assert main(["sweep", str(toml), "--out", str(tmp_path), "--workers", "1"]) == 0
    assert main(["plot", str(folder), *flags]) == 0
    (fig,) = made
    _check_layout(f"plot {kind}", fig, kind.startswith("run"))


def test_boundaries_come_from_a_function_or_a_csv_and_their_constant_is_fitted(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from attnsim._meta import PlotError
    from attnsim.plotting import boundary_points, draw_boundary, fit_power_boundary

    ns, snr = np.array([10.0, 40.0, 160.0]), np.geomspace(0.01, 1.0, 41)
    good = snr[None, :] >= 0.5 / np.sqrt(ns)[:, None]  # benign above SNR = 0.5 / sqrt(n)
    c = fit_power_boundary(ns, snr, good, power=-0.5)
    assert abs(c / 0.5 - 1) < 0.06  # the grid's half-step in SNR
    assert abs(fit_power_boundary(ns, snr, ~good, power=-0.5, edge="upper") / 0.5 - 1) < 0.06
    x, y = boundary_points(lambda n: c / np.sqrt(n), ns, independent="y")
    np.testing.assert_allclose(x * np.sqrt(y), c)
    csv = tmp_path / "curve.csv"
    csv.write_text("snr,n\n0.1,25\n0.05,100\n")
    x, y = boundary_points(csv, ())
    assert x.tolist() == [0.1, 0.05] and y.tolist() == [25, 100]
    fig, ax = plt.subplots()
    ax.set_xlim(0.01, 1)
    draw_boundary(ax, csv, label="theirs")
    assert ax.get_xlim() == (0.01, 1) and ax.lines[0].get_label() == "theirs"
    plt.close(fig)
    (tmp_path / "bad.csv").write_text("a,b,c\n1,2,3\n")
    with pytest.raises(PlotError, match="needs two columns"):
        boundary_points(tmp_path / "bad.csv", ())


def test_interpolated_edges_and_power_law_fits_recover_a_known_boundary():
    """Crossings of a smooth score interpolated between cells land on the true
    edge far inside a cell; the free exponent and its error, the form held at
    a given power, and what one crossing can (not) carry."""
    import numpy as np

    from attnsim.plotting import describe_fit, fit_power_law, interpolated_crossings

    ns, snr = np.array([25.0, 50.0, 100.0, 200.0, 400.0]), np.geomspace(0.005, 2.0, 24)
    edge = 0.2 * ns**-0.25
    error = 0.05 * (edge[:, None] / snr[None, :]) ** 3  # falls through 0.05 at the edge
    rows, cross = interpolated_crossings(ns, snr, np.log(0.05) - np.log(error), "lower")
    np.testing.assert_allclose(cross, edge, rtol=1e-12)  # linear in log error and log SNR: exact
    fit = fit_power_law(rows, cross * (1 + 0.01 * np.array([1, -1, 1, -1, 1])))
    assert abs(fit["b"] + 0.25) < 3 * fit["b_se"] and fit["b_se"] < 0.01 and fit["points"] == 5
    held = fit_power_law(rows, cross, power=-0.5)
    assert held["rms"] > 0.1  # the wrong form shows in its residuals
    assert "one point" in describe_fit(fit_power_law(rows[:1], cross[:1]))
    upper = interpolated_crossings(
        ns, snr, np.where(snr[None, :] < 0.3, 1.0, -1.0) * np.ones((5, 1)), "upper"
    )
    np.testing.assert_allclose(upper[1], np.sqrt(snr[snr < 0.3][-1] * snr[snr >= 0.3][0]))  # half-way


def test_phase_diagram_cache_from_before_the_gauss_hermite_line_gains_it(tmp_path, monkeypatch):
    """A cached fig20 theory from before the line reached omega = 0.5 and whose Gauss-Hermite
    alpha_c is the old single point at omega = 0.3 gains what it lacks (the rest kept) and is
    rewritten; a complete one is read as it is."""
    import json

    F = importlib.import_module("gallery.fig20_phase_diagram")

    calls = []

    def fake(omega, lo, hi, xtol=1e-3, **kw):
        calls.append((omega, kw.get("order")))
        return 0.5 + omega + kw.get("order", 0) / 1000

    monkeypatch.setattr(F.replica_phases, "transition", fake)
    monkeypatch.setattr(F.replica_phases, "spinodal", lambda omega, branch, alphas, **kw: (1.0, None))
    plan = F._plan(False)
    old = {"alpha_c": {str(o): 1.0 for o in plan["omegas"][:-1]}, "alpha_c_gh": {"8": 1.25, "12": 1.26}}
    old["spinodal"] = {str(o): "kept" for o in plan["omegas"][:-1]}
    path = tmp_path / "fig20_theory.json"
    path.write_text(json.dumps(old))
    th = F.theory(False, tmp_path)
    # the omega the old plan lacked (published rules), then every omega's Gauss-Hermite alpha_c
    assert len(calls) == 1 + len(plan["omegas"]) * len(plan["gh_alpha_c"])
    assert th["alpha_c_gh"]["12"]["0.3"] == 0.5 + 0.3 + 0.012
    last = str(plan["omegas"][-1])
    assert th["spinodal"]["0.3"] == "kept" and list(th["spinodal"][last]["semantic"]) == [1.0, None]
    assert F._gh_complete(json.loads(path.read_text())["alpha_c_gh"], plan)
    calls.clear()
    assert F.theory(False, tmp_path) == json.loads(json.dumps(th)) and not calls


def test_figures_from_an_install_without_the_figure_code_say_where_it_is(monkeypatch, capsys):
    """The figure code (scripts/gallery) is not installed with the package: from a wheel,
    `attnsim figures` says in one line where it lives (exit 2)."""
    from attnsim import cli_args

    monkeypatch.setattr(cli_args, "find_gallery", lambda: None)  # as from a wheel, with no checkout
    assert main(["figures", "--quick"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "scripts/gallery/ in a checkout" in err, err
