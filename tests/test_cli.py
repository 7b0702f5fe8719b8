"""Command line: exit codes, one-line errors, outputs."""

import json
import subprocess
import sys

import numpy as np
import pytest

import attnsim
from attnsim.cli import main

SMALL = ["--set", "d=60", "--set", "n=6", "--set", "steps=20", "--set", "pop_points=64"]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "attnsim.cli", *args], capture_output=True, text=True)


def test_cli_version_and_run_writes_results(tmp_path):
    out = _cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("attnsim ")
    run = _cli("run", *SMALL, "--out", str(tmp_path / "r"), "--plot", "scores")
    assert run.returncode == 0, run.stderr
    assert "engine reduced" in run.stdout and "regime:" in run.stdout
    meta = json.loads((tmp_path / "r" / "result.json").read_text())
    assert meta["config"]["d"] == 60 and meta["schema_version"] >= 1
    assert set(meta["final"]) >= {"train_loss", "pop_error", "pop_error_se", "regime", "n_noisy", "test_acc"}
    assert set(meta["theory"]) >= {"snr", "n_snr2"}
    assert not {"t_memorize", "t_generalize"} & set(meta["theory"])
    assert set(meta["final"]) >= {"t_memorize", "t_select", "t_pop_loss_settled", "times_refined"}
    assert meta["elapsed_s"] > meta["setup_s"] > 0 and meta["startup_s"] > 0 and "numba" in meta["versions"]
    assert (tmp_path / "r" / "scores.png").stat().st_size > 1000
    tr = np.load(tmp_path / "r" / "trajectory.npz")
    assert {"step", "train_loss", "train_acc", "pop_error"} <= set(tr.files)
    # the command ends its process without Python's teardown: output flushed, exit codes kept
    assert run.stdout.rstrip().splitlines()[-1].startswith(f"wrote {tmp_path / 'r'}/result.json")
    bad = _cli("run", "--set", "foo=1", "--out", str(tmp_path / "b"))
    assert bad.returncode == 2 and bad.stderr.startswith("attnsim: error: unknown config key 'foo'")
    div = _cli("run", *SMALL, "--set", "lr=1e200", "--quiet", "--out", str(tmp_path / "d"))
    assert div.returncode == 1 and "diverged" in div.stderr


def test_cli_check_grad_last_number_is_small():
    out = _cli("check-grad")
    assert out.returncode == 0
    last = out.stdout.strip().splitlines()[-1]
    assert float(last.split()[-1]) < 1e-6


def test_cli_bad_data_file_exits_2(tmp_path, capsys):
    p = tmp_path / "bad.npz"
    np.savez(p, X=np.zeros((3, 2, 4)), y=np.array([1, 0, 1]))
    assert main(["run", "--data", str(p)]) == 2
    assert "'y' must hold labels" in capsys.readouterr().err


def test_cli_diverged_run_exits_1(tmp_path, capsys):
    args = ["run", "--set", "d=20", "--set", "n=4", "--set", "T=4", "--set", "lr=1e305"]
    args += ["--set", "loss=linear", "--set", "train=p,nu", "--out", str(tmp_path / "x")]
    assert main(args) == 1
    assert "diverged at step" in capsys.readouterr().err


LONG_FLOWS = {
    "default": {},
    "p only, W = I, d = 200": {"d": 200, "train": "p", "init_W": "identity", "lr": 0.05},
    "|mu| = 5 with the limit": {"signal_norm": 5.0, "limit": True},
}


@pytest.mark.parametrize("name", list(LONG_FLOWS))
def test_cli_long_flow_finishes_with_the_numbers_of_simulate(name, tmp_path):
    """A gradient flow to 1e14 steps from the command line (a subprocess, as a
    user runs it, whose progress bar exists but is not shown) finishes, and its
    result.json holds exactly what attnsim.simulate computes: progress comes
    from the solver's own steps, never by cutting the integration."""
    flow = {"integrator": "flow", "steps": 10**14, "log_scale": "log", **LONG_FLOWS[name]}
    args = [a for k, v in flow.items() for a in ("--set", f"{k}={str(v).lower()}")]
    run = _cli("run", *args, "--quiet", "--out", str(tmp_path / "r"))
    assert run.returncode == 0, run.stderr
    got = json.loads((tmp_path / "r" / "result.json").read_text())
    want = json.loads(json.dumps(attnsim.simulate(flow, progress=True).to_json()))
    assert got["final"] == want["final"] and got["theory"] == want["theory"]
    assert got.get("limit") == want.get("limit")
