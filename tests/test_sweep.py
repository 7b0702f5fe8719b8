"""Sweeps: grids, resumable store, local and Dask executors."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from attnsim.config import ConfigError
from attnsim.sweep import Store, load_records, parse_sweep, record_key, run_sweep

BASE = {"n": 6, "T": 5, "steps": 100, "log_every": 50, "pop_points": 256, "pop_log_points": 2}


def _spec(name="t", seeds=2, **grid):
    grid = grid or {"d": [60, 90], "signal_norm": {"start": 2.0, "stop": 6.0, "num": 3}}
    return parse_sweep({"sweep": {"name": name, "seeds": seeds}, "base": BASE, "grid": grid})


def test_sweep_grid_expansion_and_validation():
    spec = _spec()
    pts = spec.points()
    assert len(pts) == 2 * 3 * 2
    assert sorted({p.signal_norm for p in pts}) == [2.0, 4.0, 6.0]
    assert parse_sweep({"grid": {"d": {"start": 250, "stop": 5000, "step": 125}}}).grid["d"][-1] == 5000
    assert len({record_key(p) for p in pts}) == len(pts)
    with pytest.raises(ConfigError, match="did you mean 'signal_norm'"):
        parse_sweep({"grid": {"signal_nrm": [1]}})
    with pytest.raises(ConfigError, match="lr:"):
        parse_sweep({"grid": {"lr": [0.1, -1]}})
    with pytest.raises(ConfigError, match="unknown table"):
        parse_sweep({"grids": {}})


def test_sweep_runs_writes_csv_and_skips_finished(tmp_path):
    spec = _spec()
    store = run_sweep(spec, tmp_path, workers=1, progress=False)
    recs = store.records()
    assert len(recs) == 12 and all(r["status"] == "ok" for r in recs)
    assert (store.root / "records.csv").read_text().count("\n") == 13
    before = {p.name: p.read_bytes() for p in store.dir.iterdir()}
    run_sweep(spec, tmp_path, workers=1, progress=False)
    assert {p.name: p.read_bytes() for p in store.dir.iterdir()} == before


_SCRIPT = """
import sys
from attnsim.sweep import parse_sweep, run_sweep
spec = parse_sweep({"sweep": {"name": "k", "seeds": 40},
                    "base": {"n": 6, "T": 5, "d": 80, "steps": 400, "pop_points": 256},
                    "grid": {"signal_norm": [3.0]}})
run_sweep(spec, sys.argv[1], workers=1, progress=False)
"""


def test_sweep_resumes_after_being_killed(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, str(tmp_path)], start_new_session=True)
    recdir = tmp_path / "k" / "records"
    deadline = time.time() + 120
    while time.time() < deadline and (not recdir.exists() or len(list(recdir.glob("*.json"))) < 3):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    first = {p.name: p.read_bytes() for p in recdir.glob("*.json")}
    assert 3 <= len(first) < 40
    for text in first.values():
        json.loads(text)  # nothing half-written
    subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path)], check=True)
    after = {p.name: p.read_bytes() for p in recdir.glob("*.json")}
    assert len(after) == 40
    assert all(after[name] == data for name, data in first.items())  # not recomputed


def test_sweep_local_processes_match_serial(tmp_path):
    spec = _spec(seeds=1)
    a = run_sweep(spec, tmp_path / "serial", workers=1, progress=False).records()
    b = run_sweep(spec, tmp_path / "pool", workers=2, progress=False).records()
    fa = {record_key_of(r): r["final"] for r in a}
    fb = {record_key_of(r): r["final"] for r in b}
    assert fa == fb


def record_key_of(rec):
    return json.dumps(rec["config"], sort_keys=True)


def test_sweep_dask_executor_matches_local(tmp_path):
    distributed = pytest.importorskip("distributed")
    spec = _spec(seeds=1)
    local = run_sweep(spec, tmp_path / "local", workers=1, progress=False).records()
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False) as cluster:
        with distributed.Client(cluster) as client:
            store = run_sweep(spec, tmp_path / "dask", client=client, progress=False)
    remote = load_records(store.root)
    assert {record_key_of(r): r["final"] for r in local} == {record_key_of(r): r["final"] for r in remote}


def test_store_ignores_temporary_files(tmp_path):
    store = Store(tmp_path)
    (store.dir / ".abc.json.123.tmp").write_text("{half")
    store.write("k1", {"a": 1})
    assert store.done() == {"k1"} and store.records() == [{"a": 1}]


def test_sweep_cli_runs_and_rejects_bad_files(tmp_path, capsys):
    from attnsim.cli import main

    good = tmp_path / "s.toml"
    good.write_text('[sweep]\nname = "c"\nseeds = 1\n[base]\nn = 6\nT = 5\nsteps = 50\npop_points = 256\n'
                    "[grid]\nd = [60, 80]\n")  # fmt: skip
    assert main(["sweep", str(good), "--out", str(tmp_path / "out"), "--workers", "1"]) == 0
    assert "2 of 2 records" in capsys.readouterr().out
    assert (tmp_path / "out" / "c" / "records.csv").exists()
    bad = tmp_path / "b.toml"
    bad.write_text("[grid]\nsignal_nrm = [1]\n")
    assert main(["sweep", str(bad)]) == 2
    assert "did you mean 'signal_norm'" in capsys.readouterr().err
    assert main(["sweep", str(tmp_path / "missing.toml")]) == 2
