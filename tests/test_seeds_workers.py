"""``attnsim run --seeds`` on worker processes: each seed's run and the summary exactly as
without them (only the times differ), a line per seed, and the rule for how many workers."""

import json

import pytest

from attnsim import cli_run
from attnsim.cli import main

TINY = {"n": 8, "T": 4, "d": 60, "steps": 60, "log_every": 20, "pop_points": 256, "pop_log_points": 2}


def _sets():
    return [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]


def test_seeds_on_workers_equal_the_seeds_run_here(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path / "one"), "--seeds", "0-3", "--workers", "1", *_sets()]) == 0
    alone = capsys.readouterr()
    assert main(["run", "--out", str(tmp_path / "two"), "--seeds", "0-3", "--workers", "2", *_sets()]) == 0
    side = capsys.readouterr()
    summary = [line for line in alone.out.splitlines() if not line.startswith("wrote")]
    assert summary == [line for line in side.out.splitlines() if not line.startswith("wrote")]
    done = [line for line in side.err.splitlines() if " done (" in line]
    assert len(done) == 4 and {line.split()[2] for line in done} == {"0", "1", "2", "3"}, side.err
    for k in range(4):
        a = json.loads((tmp_path / "one" / f"seed-{k}" / "result.json").read_text())
        b = json.loads((tmp_path / "two" / f"seed-{k}" / "result.json").read_text())
        assert a["config"] == b["config"] and a["final"] == b["final"] and a["theory"] == b["theory"]
        assert (tmp_path / "two" / f"seed-{k}" / "trajectory.npz").exists()


def test_workers_need_seeds(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path / "r"), "--workers", "2", *_sets()]) == 2
    assert "--workers: runs the seeds of --seeds side by side" in capsys.readouterr().err
    assert main(["run", "--out", str(tmp_path / "s"), "--seeds", "0-1", "--workers", "0", *_sets()]) == 2


@pytest.mark.parametrize(("asked", "seeds", "cores", "workers"), [
    (None, 3, 2, 1), (None, 7, 2, 1), (None, 8, 2, 2), (None, 200, 2, 2), (None, 200, 8, 8),
    (3, 2, 2, 2), (1, 50, 2, 1),
])  # fmt: skip
def test_how_many_workers(monkeypatch, asked, seeds, cores, workers):
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert cli_run._seed_workers(asked, seeds) == workers
