"""Every figure in --quick mode, into a temporary folder; and the CLI entry."""

import pytest

from attnsim.cli import main
from attnsim.figures import NAMES, make


@pytest.mark.slow
@pytest.mark.parametrize("name", list(NAMES))
def test_figure_quick_smoke(name, tmp_path):
    paths = make([name], outdir=tmp_path / "figs", quick=True, cache=tmp_path / "cache", log=lambda *_: None)
    pngs = [p for p in paths if p.suffix == ".png"]
    assert pngs and all(p.stat().st_size > 10_000 for p in pngs)
    numbers = [p for p in paths if p.suffix == ".txt"]  # the numbers the README quotes
    assert len(numbers) == 1 and numbers[0].read_text().strip()
    again = make([name], outdir=tmp_path / "figs", quick=True, cache=tmp_path / "cache", log=lambda *_: None)
    assert again == paths  # cached sweep records are reused


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


def test_figures_that_run_sweeps_are_listed():
    """make() starts the worker pool first when a figure in SWEEPS is asked for:
    the set must name exactly the figure modules that run sweeps."""
    import importlib
    import inspect

    from attnsim.figures import SWEEPS

    calls = ("sweep_records", "run_sweep", "encoder_records", "run_protocol")
    for name, module in NAMES.items():
        src = inspect.getsource(importlib.import_module(f"attnsim.figures.{module}"))
        assert (name in SWEEPS) == any(c + "(" in src for c in calls), name
