"""Sweeps: grids, resumable store, local and Dask executors, and what real
machines do to them (killed workers, damaged records, concurrent sweeps)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from attnsim.config import ConfigError
from attnsim.runtime.workspace import PROCESS
from attnsim.sweep.run import run_sweep
from attnsim.sweep.spec import parse_sweep, record_key
from attnsim.sweep.store import load_records

BASE = {"n": 6, "T": 5, "steps": 100, "log_every": 50, "pop_points": 256, "pop_log_points": 2}


def _spec(name="t", seeds=2, base=None, **grid):
    grid = grid or {"d": [60, 90], "signal_norm": {"start": 2.0, "stop": 6.0, "num": 3}}
    return parse_sweep({"sweep": {"name": name, "seeds": seeds}, "base": base or BASE, "grid": grid})


def test_sweep_grid_expansion_and_validation():
    spec = _spec()
    pts = spec.points()
    assert len(pts) == 2 * 3 * 2
    assert sorted({p.signal_norm for p in pts}) == [2.0, 4.0, 6.0]
    assert parse_sweep({"grid": {"d": {"start": 250, "stop": 5000, "step": 125}}}).grid["d"][-1] == 5000
    assert parse_sweep({"sweep": {"save": "train_loss"}}).save == ["train_loss"]
    assert len({record_key(p) for p in pts}) == len(pts)
    with pytest.raises(ConfigError, match="did you mean 'signal_norm'"):
        parse_sweep({"grid": {"signal_nrm": [1]}})
    with pytest.raises(ConfigError, match="lr:"):
        parse_sweep({"grid": {"lr": [0.1, -1]}})
    with pytest.raises(ConfigError, match="unknown table"):
        parse_sweep({"grids": {}})


def test_sweep_runs_writes_csv_and_skips_finished(tmp_path):
    spec = _spec()
    rep = run_sweep(spec, tmp_path, workers=1, progress=False)
    recs = rep.records()
    assert len(recs) == 12 and all(r["status"] == "ok" for r in recs) and rep.computed == 12
    assert (rep.root / "records.csv").read_text().count("\n") == 13
    before = {p.name: p.read_bytes() for p in rep.store.dir.iterdir()}
    again = run_sweep(spec, tmp_path, workers=1, progress=False)
    assert again.computed == 0 and again.ok == 12
    assert {p.name: p.read_bytes() for p in rep.store.dir.iterdir()} == before


_SCRIPT = """
import sys
from attnsim.sweep import parse_sweep, run_sweep
spec = parse_sweep({"sweep": {"name": "k", "seeds": int(sys.argv[3])},
                    "base": {"n": 6, "T": 5, "d": 80, "steps": int(sys.argv[4]), "pop_points": 256},
                    "grid": {"signal_norm": [3.0]}})
rep = run_sweep(spec, sys.argv[1], workers=int(sys.argv[2]), progress=False)
print("computed", rep.computed, "ok", rep.ok, "failed", rep.failed, "workers", rep.workers)
for m in rep.messages:
    print(m)
"""


def _script(tmp_path, workers, seeds=40, steps=400, **kw):
    return subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, str(tmp_path), str(workers), str(seeds), str(steps)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw,
    )  # fmt: skip


def _wait_for_records(recdir, count, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline and (not recdir.exists() or len(list(recdir.glob("*.json"))) < count):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)


@pytest.mark.parametrize("workers", [1, 2])
def test_sweep_resumes_after_the_whole_group_is_killed(tmp_path, workers):
    proc = _script(tmp_path, workers, start_new_session=True)
    recdir = tmp_path / "k" / "records"
    _wait_for_records(recdir, 3, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()  # reaps it and closes its pipes
    first = {p.name: p.read_bytes() for p in recdir.glob("*.json")}
    assert 3 <= len(first) < 40
    for text in first.values():
        json.loads(text)  # nothing half-written
    out = _script(tmp_path, workers).communicate(timeout=300)[0]
    after = {p.name: p.read_bytes() for p in recdir.glob("*.json")}
    assert len(after) == 40 and f"computed {40 - len(first)} ok 40 failed 0" in out
    assert all(after[name] == data for name, data in first.items())  # not recomputed


def _workers_of(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    mine = []
    for child in out:
        try:
            with open(f"/proc/{child}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if b"spawn_main" in cmd:
            mine.append(int(child))
    return mine


def test_sweep_survives_a_killed_worker(tmp_path):
    # points of about 0.25 s: the kill, a few ms after a record appears, finds the
    # worker inside its next point rather than between points (30 ms points raced)
    proc = _script(tmp_path, 2, seeds=24, steps=20000)
    _wait_for_records(tmp_path / "k" / "records", 2, proc)
    victims = _workers_of(proc.pid)
    assert victims
    os.kill(victims[0], signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "ok 24 failed 0" in out and "a worker died (exit code -9)" in out


_KILLER = """
import os, signal
import attnsim.sweep.executors as sweep
_run = sweep.run_point
def run_point(cfg, save, data=None):
    if cfg.get("signal_norm") == 13.0:
        os.kill(os.getpid(), signal.SIGKILL)  # what the out-of-memory killer does
    return _run(cfg, save, data)
sweep.run_point = run_point
"""


def test_sweep_point_that_keeps_killing_workers_is_recorded_as_failed(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_KILLER)
    script = textwrap.dedent(f"""
        from attnsim.sweep import parse_sweep, run_sweep
        spec = parse_sweep({{"sweep": {{"name": "x"}}, "base": {BASE!r}, "grid": {{"d": [40, 50, 60],
                            "signal_norm": [3.0, 13.0]}}}})
        rep = run_sweep(spec, {str(tmp_path)!r}, workers=2, progress=False)
        print("ok", rep.ok, "failed", rep.failed)
    """)
    env = dict(os.environ, PYTHONPATH=str(site))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "ok 3 failed 3" in out.stdout
    failed = [r for r in load_records(tmp_path / "x") if r["status"] == "failed"]
    assert len(failed) == 3 and all("died 2 times (killed by SIGKILL" in r["error"] for r in failed)


def test_sweep_local_processes_match_serial(tmp_path):
    spec = _spec(seeds=1)
    a = run_sweep(spec, tmp_path / "serial", workers=1, progress=False)
    b = run_sweep(spec, tmp_path / "pool", workers=2, progress=False)
    assert a.workers == 0 and b.workers == 2
    assert {record_key_of(r): r["final"] for r in a.records()} == {
        record_key_of(r): r["final"] for r in b.records()
    }


def test_sweep_never_starts_more_workers_than_tasks(tmp_path):
    one = run_sweep(_spec(seeds=1, d=[60], signal_norm=[2.0]), tmp_path, workers=16, progress=False)
    assert one.workers == 0 and one.ok == 1


def record_key_of(rec):
    return json.dumps(rec["config"], sort_keys=True)


def test_sweep_dask_executor_matches_local(tmp_path, workers_in_this_process):
    distributed = pytest.importorskip("distributed")
    spec = _spec(seeds=1)
    local = run_sweep(spec, tmp_path / "local", workers=1, progress=False).records()
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
    ) as cluster:
        with distributed.Client(cluster) as client:
            rep = run_sweep(spec, tmp_path / "dask", client=client, progress=False)
    remote = load_records(rep.root)
    assert {record_key_of(r): r["final"] for r in local} == {record_key_of(r): r["final"] for r in remote}


def test_damaged_records_are_moved_aside_and_recomputed(tmp_path):
    spec = _spec(seeds=1)
    first = run_sweep(spec, tmp_path, workers=1, progress=False)
    paths = [first.store.path(k) for k in first.keys[:3]]
    good = paths[0].read_bytes()
    paths[0].write_bytes(good[: len(good) // 2])  # truncated by a crash of the file system
    paths[1].write_text("{}")
    paths[2].write_text("[]")
    again = run_sweep(spec, tmp_path, workers=1, progress=False)
    assert again.computed == 3 and again.ok == len(spec.points())
    assert any("damaged" in m and paths[0].name in m and paths[2].name in m for m in again.messages)
    assert len(list((first.store.dir / "damaged").iterdir())) == 3
    assert json.loads(paths[0].read_bytes())["status"] == "ok"


def test_failed_points_are_retried_on_rerun(tmp_path):
    spec = _spec(seeds=1, base={**BASE, "lr": 1e300}, d=[60, 70, 80])  # diverges: recorded as failed
    first = run_sweep(spec, tmp_path, workers=1, progress=False)
    assert first.failed == 3 and first.computed == 3
    assert "diverged at step" in first.records()[0]["error"]
    again = run_sweep(spec, tmp_path, workers=1, progress=False)
    assert again.computed == 3 and any("retried 3" in m for m in again.messages)


def test_changed_grid_reports_only_the_current_sweep(tmp_path):
    big = _spec(name="g", seeds=1, d=[60, 80], signal_norm=[2.0])
    run_sweep(big, tmp_path, workers=1, progress=False)
    small = _spec(name="g", seeds=1, d=[60], signal_norm=[2.0])
    rep = run_sweep(small, tmp_path, workers=1, progress=False)
    assert rep.ok == 1 and len(rep.keys) == 1 and rep.computed == 0
    assert (rep.root / "records.csv").read_text().count("\n") == 2
    assert json.loads((rep.root / "sweep.json").read_text())["grid"]["d"] == [60]
    kept = list(rep.root.glob("sweep.*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["grid"]["d"] == [60, 80]


def test_two_sweeps_into_one_folder_compute_each_point_once(tmp_path):
    procs = [_script(tmp_path, 1, seeds=12, steps=600) for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    computed = [int(o.split()[1]) for o in outs]
    assert sum(computed) == 12, outs
    assert not list((tmp_path / "k" / "records").glob("*.lock"))


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


def test_worker_pool_serves_every_sweep_in_its_block(tmp_path):
    """Inside worker_pool() the workers the first sweep starts stay for the next
    sweep (no new ones started), with the records a serial run writes; they
    stop when the block ends. A sweep with many records to compute starts
    its workers before reading and sorting them."""
    from attnsim.sweep import executors as sweep

    serial = run_sweep(_spec(seeds=1), tmp_path / "serial", workers=1, progress=False)
    with sweep.worker_pool():
        assert PROCESS.idle_workers == []
        a = run_sweep(_spec(seeds=1), tmp_path / "a", workers=2, progress=False)
        kept = [w.proc for w in PROCESS.idle_workers]
        assert len(kept) == 2 and all(p.is_alive() for p in kept)
        b = run_sweep(_spec(name="u", seeds=1), tmp_path / "b", workers=2, progress=False)
        assert sorted(id(w.proc) for w in PROCESS.idle_workers) == sorted(id(p) for p in kept)
    assert PROCESS.idle_workers is None
    for p in kept:
        p.join(10)
        assert not p.is_alive()
    assert a.workers == b.workers == 2
    finals = {record_key_of(r): r["final"] for r in serial.records()}
    for rep in (a, b):
        assert rep.ok == len(finals) and {record_key_of(r): r["final"] for r in rep.records()} == finals
    again = run_sweep(_spec(seeds=1), tmp_path / "a", workers=2, progress=False)  # all done: no worker starts
    assert again.workers == 0 and again.computed == 0


def test_cheap_setup_groups_go_in_short_tasks():
    from attnsim.sweep.run import TAIL_POINTS, _chunks

    group = list(range(39))
    whole = _chunks(group, 1521, 2, setup_flops=1e10, point_flops=2e8)  # setup of 50 points: kept whole
    assert whole == [group]
    parts = _chunks(group, 1521, 2, setup_flops=1e8, point_flops=2e8)  # half a point's steps: split
    assert [len(p) for p in parts] == [TAIL_POINTS] * 4 + [39 - 4 * TAIL_POINTS]
    assert sum(parts, []) == group
    assert _chunks(group, 1521, 2, setup_flops=0.0, point_flops=0.0) == [group]  # cost unknown (data)
    assert [len(p) for p in _chunks(list(range(10)), 10, 2)] == [2] * 5  # every worker gets work


def test_the_twins_of_one_exact_run_go_to_one_worker_one_after_the_other():
    """Points that differ only in their precision twin's keys share their exact run: they
    are put next to each other in their setup group and no split falls between them (the
    worker then trains the run once); any other point keeps its place."""
    from attnsim.sweep.run import _chunks, _runs_together, run_key
    from attnsim.sweep.spec import Task

    def task(i, **keys):
        return Task(f"k{i}", {"d": 200, "seed": 0, **keys}, [])

    tasks = [
        task(i, signal_norm=float(i % 3), precision_twin=f)
        for i, f in enumerate(["float32"] * 3 + ["bfloat16"] * 3)
    ]
    tasks += [task(6, signal_norm=9.0), task(7, signal_norm=9.0, precision_twin="none")]
    tasks.append(task(8, signal_norm=0.0, precision_twin="bfloat16", precision_graph="official"))
    order = _runs_together(tasks)
    assert [t.key for t in order] == ["k0", "k3", "k8", "k1", "k4", "k2", "k5", "k6", "k7"]
    assert run_key(tasks[6]) != run_key(tasks[7])  # no twin: each point is its own run
    for size_total in (9, 18, 36):
        parts = _chunks(order, size_total, 2, key=run_key)
        assert sum(parts, []) == order
        assert all(run_key(p[-1]) != run_key(q[0]) for p, q in zip(parts, parts[1:]))
    assert [len(p) for p in _chunks(order, 9, 2)] == [2, 2, 2, 2, 1]  # without a key: as before


def test_worker_pool_can_start_its_workers_at_once(tmp_path):
    from attnsim.sweep import executors as sweep

    with sweep.worker_pool(start=2):
        started = [w.proc for w in PROCESS.idle_workers]
        assert len(started) == 2
        rep = run_sweep(_spec(seeds=1), tmp_path, workers=2, progress=False)
        assert sorted(id(w.proc) for w in PROCESS.idle_workers) == sorted(id(p) for p in started)
    assert rep.ok == 6 and rep.workers == 2
    for p in started:
        p.join(10)
        assert not p.is_alive()


@pytest.mark.parametrize("executor", ["local", "dask"])
def test_records_of_a_data_sweep_verify_when_read_again(executor, tmp_path, workers_in_this_process):
    """With data the record's config is what the file decided: the record keeps
    the point its key is of, whichever executor wrote it."""
    import shutil
    from pathlib import Path

    data = tmp_path / "x.npz"
    shutil.copy(Path(__file__).parent / "data" / "peer_small.npz", data)
    mapping = {
        "sweep": {"name": "dat", "data": str(data)},
        "base": {"steps": 5},
        "grid": {"lr": [0.01, 0.02]},
    }
    spec = parse_sweep(mapping)
    if executor == "dask":
        distributed = pytest.importorskip("distributed")
        with distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster:
            with distributed.Client(cluster) as client:
                first = run_sweep(spec, tmp_path, client=client, progress=False)
    else:
        first = run_sweep(spec, tmp_path, workers=1, progress=False)
    assert first.ok == 2
    again = run_sweep(parse_sweep(mapping), tmp_path, workers=1, progress=False)
    assert again.computed == 0 and again.ok == 2 and not any("damaged" in m for m in again.messages)
