"""Sweeps on real clusters: Dask worker *processes* on 127.0.0.1 (they can die, as
threads cannot), killed mid-sweep with and without their nannies, a point whose
worker dies every time, workers started from the command line as a cluster user
starts them, and any concurrent.futures Executor."""

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

from attnsim.cli import main
from attnsim.config import ConfigError
from attnsim.sweep.executors import check_workers, worker_identity
from attnsim.sweep.run import run_sweep
from attnsim.sweep.spec import parse_sweep, read_spec
from attnsim.sweep.store import load_records

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")
pytestmark = pytest.mark.slow

BASE = {"n": 6, "T": 5, "d": 60, "pop_points": 256, "pop_log_points": 2}
LIMIT = 240  # seconds any one sweep here may take


def _spec(name, steps, seeds=3, **grid):
    base = {**BASE, "steps": steps, "log_every": steps // 2}
    grid = grid or {"signal_norm": [2.0, 5.0]}
    return parse_sweep({"sweep": {"name": name, "seeds": seeds}, "base": base, "grid": grid})


def _finals(records):
    return {json.dumps(r["config"], sort_keys=True): r["final"] for r in records}


def _cluster(n_workers=2):
    return distributed.LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=":0",  # any free port: None still tries 8787, which another Dask may hold
        silence_logs=50,
    )


def _in_thread(fn):
    """Run ``fn`` in a thread; returns a callable giving its result (bounded in time)."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001  (re-raised in the test's thread)
            box["error"] = exc

    th = threading.Thread(target=target, daemon=True)
    th.start()

    def result():
        th.join(LIMIT)
        assert not th.is_alive(), f"the sweep did not finish in {LIMIT} s"
        if "error" in box:
            raise box["error"]
        return box["value"]

    return result


def _wait_until(cond, what, timeout=LIMIT):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def _busy(client, among):
    """The address of a worker in ``among`` computing a point now, or None."""
    busy = sorted(a for a, ks in client.processing().items() if ks and a in among)
    return busy[0] if busy else None


def test_a_point_whose_worker_dies_is_recorded_failed_and_the_sweep_goes_on(tmp_path):
    spec = _spec("dies", steps=200_000, seeds=2)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with _cluster(1) as cluster, distributed.Client(cluster) as client:
            pids = client.run(os.getpid)
            result = _in_thread(lambda: run_sweep(spec, tmp_path, client=client, progress=False))
            _wait_until(lambda: _busy(client, pids), "a busy worker")
            os.kill(pids[_busy(client, pids)], signal.SIGKILL)  # KilledWorker: no retry allowed
            rep = result()
    recs = load_records(rep.root)
    failed = [r for r in recs if r["status"] != "ok"]
    assert rep.failed == len(failed) >= 1 and rep.ok + rep.failed == len(spec.points())
    assert all("KilledWorker" in r["error"] for r in failed), failed[0]["error"]
    assert (rep.root / "records.csv").read_text().count("\n") == len(spec.points()) + 1
    again = run_sweep(spec, tmp_path, workers=1, progress=False)  # a rerun retries them
    assert again.computed == len(failed) and again.ok == len(spec.points())


@pytest.fixture
def cli_cluster(tmp_path):
    """A scheduler and two workers (each a nanny process and its worker) started as a
    cluster user starts them, on 127.0.0.1; yields the scheduler's address."""
    sched_file = tmp_path / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "error"}
    cli = [sys.executable, "-m", "distributed.cli"]
    scheduler = [*cli[:2], "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0"]
    procs = [
        subprocess.Popen(
            [*scheduler, "--no-dashboard", "--scheduler-file", str(sched_file)],
            env=env,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        _wait_until(lambda: sched_file.exists() and sched_file.stat().st_size, "the scheduler", timeout=60)
        time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        worker = [*cli[:2], "distributed.cli.dask_worker", address, "--nthreads", "1", "--host", "127.0.0.1"]
        for _ in range(2):
            procs.append(subprocess.Popen([*worker, "--no-dashboard"], env=env, stderr=subprocess.DEVNULL))
        with distributed.Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for p in procs[::-1]:
            p.terminate()
        for p in procs[::-1]:
            try:
                p.wait(3)
            except subprocess.TimeoutExpired:
                p.kill()  # a nanny waits for its worker's graceful close: not needed here
                p.wait(10)


def test_workers_killed_mid_sweep_with_and_without_their_nanny_lose_nothing(tmp_path, cli_cluster):
    spec = _spec("kill", steps=100_000, seeds=2)
    local = run_sweep(spec, tmp_path / "local", workers=1, progress=False).records()
    with distributed.Client(cli_cluster, timeout=30) as client:
        pids, nannies = client.run(os.getpid), client.run(os.getppid)  # address -> pid
        assert os.getpid() not in nannies.values()
        result = _in_thread(lambda: run_sweep(spec, tmp_path / "dask", client=client, progress=False))
        _wait_until(lambda: _busy(client, pids), "a busy worker")
        first = _busy(client, pids)
        os.kill(pids.pop(first), signal.SIGKILL)  # its nanny restarts it; its point is recomputed
        _wait_until(lambda: _busy(client, pids), "the other worker busy")
        second = _busy(client, pids)
        os.kill(nannies[second], signal.SIGKILL)  # no one restarts this worker
        os.kill(pids.pop(second), signal.SIGKILL)
        rep = result()
    assert rep.failed == 0 and rep.ok == len(spec.points())
    assert _finals(load_records(rep.root)) == _finals(local)
    assert (rep.root / "records.csv").read_text().count("\n") == len(spec.points()) + 1


def test_sweep_command_with_scheduler_matches_a_local_run(tmp_path, cli_cluster, capsys):
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        '[sweep]\nname = "cli"\nseeds = 2\n[base]\nn = 6\nT = 5\nd = 60\nsteps = 200\npop_points = 256\n'
        "[grid]\nsignal_norm = [2.0, 5.0]\n"
    )
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--scheduler", cli_cluster]) == 0
    assert "4 of 4 records" in capsys.readouterr().out
    local = run_sweep(read_spec(sweep), tmp_path / "local", workers=1, progress=False)
    assert _finals(load_records(tmp_path / "out" / "cli")) == _finals(local.records())


def test_any_concurrent_futures_executor_runs_a_sweep_to_the_same_records(tmp_path):
    spec = _spec("pool", steps=200)
    local = run_sweep(spec, tmp_path / "local", workers=1, progress=False).records()
    with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
        rep = run_sweep(spec, tmp_path / "pool", executor=pool, progress=False)
    assert rep.ok == len(spec.points()) and _finals(rep.records()) == _finals(local)


def test_a_cluster_mixing_attnsim_revisions_is_refused():
    here = worker_identity()
    check_workers([here, dict(here)])
    other = {**here, "git": {**here["git"], "revision": "0" * 40}}
    with pytest.raises(ConfigError, match="mixed cluster"):
        check_workers([here, other])


# the hostile report's RACE: one seed's points over d and two W(0) kinds draw W(0) from one stream
# state, which a worker keeps (KeptDraws) for the next point of a smaller d
RACE = {"n": 6, "T": 4, "steps": 200, "pop_points": 64, "signal_norm": 3.0}
RACE_GRID = {"d": [400, 800, 1200, 1600], "init_W": ["gaussian", "kaiming_uniform"]}


def _race_spec():
    return parse_sweep({"sweep": {"name": "race", "seeds": [0, 1, 2]}, "base": RACE, "grid": RACE_GRID})


def _numbers(records):
    return {
        json.dumps(r["config"], sort_keys=True): (r["status"], r.get("final"), r.get("theory"))
        for r in records
    }


def test_a_threaded_executor_and_a_two_thread_dask_worker_record_what_one_worker_does(tmp_path):
    """Points computed at once on two threads of one process shared the kept draws of W(0): 15
    of 24 failed and one was recorded "ok" with wrong numbers. Each thread now has its own
    workspace (a thread pool in the caller's process also runs one point at a time and pins
    nothing of the caller's process): the records equal the sequential ones, every one."""
    from concurrent.futures import ThreadPoolExecutor

    from attnsim.runtime import threads

    spec = _race_spec()
    local = _numbers(run_sweep(spec, tmp_path / "one", workers=1, progress=False).records())
    assert len(local) == 24 and all(v[0] == "ok" for v in local.values())
    before = (threads.threads(), os.environ.get("OPENBLAS_NUM_THREADS"))
    for n in (2, 4):
        with ThreadPoolExecutor(n) as pool:
            rep = run_sweep(spec, tmp_path / f"threads{n}", executor=pool, progress=False)
        assert _numbers(rep.records()) == local
    assert (threads.threads(), os.environ.get("OPENBLAS_NUM_THREADS")) == before  # the caller's, as it was
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1",
                                       dashboard_address=":0", silence_logs=50)  # fmt: skip
    try:
        with distributed.Client(cluster) as client:
            rep = run_sweep(spec, tmp_path / "dask", client=client, progress=False)
    finally:
        cluster.close()
    assert _numbers(rep.records()) == local


def test_an_executor_that_is_not_one_and_workers_beside_one_are_refused(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    spec = _spec("bad", steps=10, seeds=1)

    class NoFutures:
        def submit(self, fn, *args):
            return None

    for executor, match in ((5, "executor: expected a concurrent.futures.Executor"),
                            (NoFutures(), "executor: its submit returned NoneType")):  # fmt: skip
        with pytest.raises(ConfigError, match=match):
            run_sweep(spec, tmp_path / "x", executor=executor, progress=False)
    with ThreadPoolExecutor(1) as pool, pytest.raises(ConfigError, match="workers: sets the local worker"):
        run_sweep(spec, tmp_path / "y", executor=pool, workers=3, progress=False)
