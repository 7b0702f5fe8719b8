"""`attnsim plot` on what folders really hold: every plot kind's file name and format,
notes on damaged, missing and failed records, runs whose metrics are all missing, and
the roles a data model has."""

import json
import shutil
import warnings

import numpy as np
import pytest

from attnsim.cli import main
from attnsim.run import simulate
from attnsim.sweep.run import run_sweep
from attnsim.sweep.spec import parse_sweep

TINY = {"n": 6, "T": 5, "d": 40, "steps": 30, "pop_points": 64}


@pytest.fixture(scope="module")
def sweep_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    spec = parse_sweep(
        {"sweep": {"name": "sw", "seeds": 2}, "base": TINY, "grid": {"signal_norm": [2.0, 5.0]}}
    )
    return run_sweep(spec, root, workers=1, progress=False).root


def _copy(src, tmp_path):
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def _legend_texts(monkeypatch, argv):
    import attnsim.report_figures

    made = []
    keep = lambda fig, path, dpi=110, fmt="png": made.append(fig)  # noqa: E731
    monkeypatch.setattr(attnsim.report_figures, "save_png", keep)
    assert main(argv) == 0
    return [t.get_text() for ax in made[0].axes if ax.get_legend() for t in ax.get_legend().get_texts()]


def test_every_plot_of_a_sweep_has_its_own_file_and_the_suffix_names_the_format(sweep_root, tmp_path):
    root = _copy(sweep_root, tmp_path)
    for flags, name in [
        ([], "pop_error-vs-signal_norm.png"),
        (["--logy"], "pop_error-vs-signal_norm-logy.png"),
        (["--metric", "regime"], "regime-vs-signal_norm.png"),
    ]:
        assert main(["plot", str(root), *flags]) == 0
        assert (root / name).read_bytes()[:4] == b"\x89PNG", name
    assert main(["plot", str(root), "--out", str(tmp_path / "f.pdf")]) == 0
    assert (tmp_path / "f.pdf").read_bytes()[:4] == b"%PDF"
    assert main(["plot", str(root), "--out", str(tmp_path / "f.svg")]) == 0
    assert b"<svg" in (tmp_path / "f.svg").read_bytes()[:400]


def test_a_sweep_plot_says_what_it_leaves_out(sweep_root, tmp_path, capsys):
    root = _copy(sweep_root, tmp_path)
    records = sorted((root / "records").glob("*.json"))
    records[0].write_text("{")  # damaged
    records[1].unlink()  # not computed yet
    rec = json.loads(records[2].read_text())
    rec.update(status="failed", error="diverged at step 3")
    records[2].write_text(json.dumps(rec))
    assert main(["plot", str(root)]) == 0
    err = capsys.readouterr().err
    assert "damaged record" in err and records[0].name in err
    assert "unfinished: 2 of 4 runs have a record" in err  # the damaged one moved aside, one missing
    assert "1 run(s) failed and are not drawn" in err


def test_a_run_whose_metrics_are_all_missing_draws_without_library_warnings(tmp_path, monkeypatch):
    res = simulate(TINY)
    for key in list(res.trajectory):
        if key.startswith(("pop_", "score_", "train_", "test_")):
            res.trajectory[key] = np.full(res.trajectory[key].shape, np.nan)
    res.save(tmp_path / "r")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "No artists with labels" is a UserWarning
        assert _legend_texts(monkeypatch, ["plot", str(tmp_path / "r")]) == []


def test_a_run_plot_names_only_the_roles_its_data_has_and_sums_over_tokens(tmp_path, monkeypatch):
    assert main(["run", "--preset", "magen2025", "--set", "steps=20", "--out", str(tmp_path / "m")]) == 0
    labels = _legend_texts(monkeypatch, ["plot", str(tmp_path / "m")])
    assert not any("weak" in t for t in labels) and any("relevant" in t for t in labels)
    assert main(["run", "--set", "steps=20", "--out", str(tmp_path / "d")]) == 0
    labels = _legend_texts(monkeypatch, ["plot", str(tmp_path / "d")])
    assert "clean: irrelevant (5 tokens)" in labels and "clean: weak_aligned" in labels
