"""A theorist's first hour, second pass: the frictions it found, held (each test names its item)."""

import csv

import pytest

import attnsim
from attnsim.cli import main
from attnsim.config import ConfigError
from attnsim.report import format_step

TINY = {"n": 6, "T": 4, "d": 20, "steps": 5, "pop_points": 64}


def test_10_a_result_prints_as_one_line(tmp_path):
    res = attnsim.simulate(TINY)
    for text in (repr(res), str(res)):
        assert "\n" not in text and len(text) < 200, text
        assert "model=attention" in text and "regime=" in text


def test_10_trajectories_of_a_sweep_that_saves_none_are_refused_in_words(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        '[sweep]\nname = "s"\nseeds = [0]\n[base]\nn = 6\nT = 4\nd = 20\nsteps = 5\npop_points = 64\n'
        "[grid]\nlr = [0.05, 0.1]\n"
    )
    assert main(["sweep", str(path), "--out", str(tmp_path / "s"), "--workers", "1"]) == 0
    folder = tmp_path / "s" / "s"  # --out holds the sweep's folder, by its name
    with pytest.raises(ConfigError, match="saves no trajectories"):
        attnsim.load_trajectories(folder)
    with open(folder / "records.csv") as fh:
        header = next(csv.reader(fh))
    assert "config.lr" in header
    for foreign in ("config.alpha", "config.omega", "config.teacher_A", "config.mirror_p", "config.adam_eps"):
        assert foreign not in header  # another model's or optimizer's key: never read by these runs
    table = attnsim.load_sweep(folder)
    assert "config.omega" not in table.columns


@pytest.mark.parametrize(
    "t, text",
    [(1000, "1000"), (14774, "14774"), (1e6, "1e+06"), (1e14, "1e+14"), (1234567, "1234567"), (3.5, "3.5")],
)
def test_10_step_counts_print_as_a_person_reads_them(t, text):
    assert format_step(t) == text


def test_10_a_flow_summary_says_1e14_steps(capsys):
    from attnsim.report import format_summary

    res = attnsim.simulate({**TINY, "integrator": "flow", "steps": 1e14, "log_scale": "log", "log_points": 5})
    head = format_summary(res).splitlines()[0]
    assert "1e+14 steps" in head, head
