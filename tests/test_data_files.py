"""--data as the README describes it: a file with X and y alone is refused naming the head,
the file decides the keys its arrays hold (and warns of overridden ones), no roles means
no role scores."""

import json
import stat
from pathlib import Path

import numpy as np
import pytest

import attnsim
from attnsim.cli import main

SMALL = ["--set", "d=40", "--set", "n=6", "--set", "T=5", "--set", "steps=20", "--set", "pop_points=64"]


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _fixture(tmp_path, **changes):
    arrays = dict(np.load(Path(__file__).parent / "data" / "peer_small.npz"))
    for k, v in changes.items():
        if v is None:
            arrays.pop(k, None)
        else:
            arrays[k] = v
    path = tmp_path / "d.npz"
    np.savez(path, **arrays)
    return str(path)


def test_data_with_X_and_y_only_is_refused_naming_the_head(tmp_path, capsys):
    keep = {"X", "y"}
    f = dict(np.load(Path(__file__).parent / "data" / "peer_small.npz"))
    path = _fixture(tmp_path, **{k: None for k in f if k not in keep})
    assert main(["run", "--data", path, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "need array 'nu'" in err and "X and y alone" in err


def test_data_decides_what_it_holds_and_warns_about_overridden_keys(tmp_path, capsys):
    path = _fixture(tmp_path, mu_pos=None, mu_neg=None)  # no signals: no SNR, no population
    args = [
        "run",
        "--data",
        path,
        "--set",
        "n=99",
        "--set",
        "d=5",
        "--set",
        "test_n=7",
        "--set",
        "noise_rate=0.3",
    ]
    assert main([*args, "--set", "steps=5", "--out", str(tmp_path / "o")]) == 0
    out, err = capsys.readouterr()
    warning = [line for line in err.splitlines() if "overridden by the data file" in line]
    assert len(warning) == 1
    for key in ("n (99 -> 10", "d (5 -> 64", "test_n (ignored", "noise_rate (ignored"):
        assert key in warning[0]
    meta = json.loads((tmp_path / "o" / "result.json").read_text())
    assert meta["theory"]["snr"] is None and meta["final"]["pop_error"] is None
    assert "mu_pos, mu_neg and sigma" in meta["data"]["population"]
    assert "SNR" not in out and "|mu|" not in out and "noisy labels" in out


def test_data_without_roles_has_no_population_role_scores(tmp_path):
    r = attnsim.simulate({"steps": 5, "log_every": 1}, data=_fixture(tmp_path))
    assert np.isnan(r.final["pop_error"]) and "roles" in r.data["population"]
    assert np.isnan(r.final["score_clean_relevant"])
    assert r.theory["snr"] == pytest.approx(5 / 8)  # |mu| and sigma come from the file
