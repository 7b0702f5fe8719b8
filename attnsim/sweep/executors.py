"""Where a sweep's points run: long-lived local worker processes (spawned, one per
core, replaced when they die), or any concurrent.futures Executor (a Dask cluster's
among them), one point per task; all hand finished records to the store."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from ..config import ConfigError
from ..results import WriteError
from ..runtime.resources import HUGEPAGE_ENV
from ..runtime.signals import end_process, on_signal
from ..runtime.threads import pin_one_thread
from ..runtime.workspace import PROCESS
from .point import _failed_record, point_workspace, run_point
from .spec import Task
from .store import Store, SweepReport, stamped

MAX_DEATHS = 2  # workers a point may take down with it before it is recorded as failed


_WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}


def _worker_main(conn) -> None:
    """A worker: loads the kernels, then receives tasks (a store folder and a
    list of points), computes and writes each record, and reports ("done",
    key, status) per point and ("idle",) per task."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C

    def _term():
        raise SystemExit(143)  # unwinds: temporary files are removed, locks released

    on_signal(signal.SIGTERM, _term)
    code = 0
    try:
        _serve(conn)
    except SystemExit as exc:  # SIGTERM, after unwinding (temporary files removed, locks released)
        code = exc.code if isinstance(exc.code, int) else 1
    end_process(code)  # every record is written and closed; the parent would wait for a teardown


def _serve(conn) -> None:
    """Load the kernels, then compute the tasks the parent sends until it sends None."""
    with contextlib.suppress(Exception):  # while the parent prepares the work (a failure shows in the points)
        from ..run import ensure_compiled  # the worker's own start: its kernels load here

        ensure_compiled(workspace=point_workspace())
    stores: dict[str, Store] = {}
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                return
            root, task = msg
            try:
                store = stores.setdefault(root, Store(Path(root)))
                for point in task:
                    conn.send(("done", point.key, store.compute(point, run_point)))
            except WriteError as exc:  # a full disk, a read-only folder: the parent stops the sweep
                conn.send(("write-error", str(exc)))
                return
            conn.send(("idle",))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the parent is gone: nothing to report to


class _Worker:
    def __init__(self, ctx):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.task: list | None = None  # the points sent and not yet reported
        self.job: tuple | None = None  # (store, report) of those points


@contextlib.contextmanager
def worker_pool(start: int = 0) -> Iterator[None]:
    """Keep the local worker processes a sweep starts for the next sweeps run
    inside the block; they stop when it ends.

    A worker spends about a second importing attnsim and loading its kernels
    before its first point; later sweeps in the block (``attnsim figures``
    makes several) do not pay that again. ``start``: workers to start at
    once, when the caller knows there is work (their loading then overlaps
    whatever it does before its first sweep). Without this block each sweep
    stops its workers when it ends. Nested blocks share the outer one's workers.
    """
    if PROCESS.idle_workers is not None:
        yield
        return
    PROCESS.idle_workers = [_spawn() for _ in range(start)] if start > 1 else []  # one alone: sweeps run here
    try:
        yield
    finally:
        pool, PROCESS.idle_workers = PROCESS.idle_workers, None
        _stop(pool, idle_exit=False)


def _take_workers(n: int, report: SweepReport) -> list[_Worker]:
    """``n`` workers: the block's idle ones first (:func:`worker_pool`), new ones for the rest."""
    pool: list[_Worker] = []
    while PROCESS.idle_workers and len(pool) < n:
        w = PROCESS.idle_workers.pop(0)
        if w.proc.exitcode is None:
            pool.append(w)
        else:
            w.conn.close()
    pool += [_spawn() for _ in range(n - len(pool))]
    report.workers += len(pool)
    return pool


def _release(pool: list[_Worker]) -> None:
    """Idle workers back to the block's pool (:func:`worker_pool`), or stopped outside one."""
    if PROCESS.idle_workers is not None:
        PROCESS.idle_workers.extend(w for w in pool if w.proc.exitcode is None and not w.task)
        _stop([w for w in pool if w.proc.exitcode is not None or w.task])
    else:
        _stop(pool)


@contextlib.contextmanager
def worker_env() -> Iterator[None]:
    """The environment worker processes spawned inside the block start with (they read it
    before importing numpy): one BLAS, OpenMP and Numba thread each."""
    env = {**_WORKER_ENV, HUGEPAGE_ENV[0]: os.environ.get(*HUGEPAGE_ENV)}  # the user's choice, else off
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _spawn() -> _Worker:
    with worker_env():
        return _Worker(mp.get_context("spawn"))  # Numba's threads do not survive fork


def _run_local(
    jobs: list[tuple[Store, SweepReport, list]],
    bar,
    workers: int,
    started: list[_Worker],
    task_done: Callable[[SweepReport], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Run the tasks of ``jobs`` ((store, report, points) each, in this order) here
    (``workers`` <= 1) or on ``workers`` worker processes, those ``started`` (already
    loading) first; the workers are released after. ``task_done(report)`` after each
    task; ``stop`` set: return at once (busy workers are terminated on release)."""
    pool = started[:workers] if workers > 1 else []
    _release(started[len(pool) :])
    if workers <= 1:
        for store, report, task in jobs:
            for point in task:
                if stop is not None and stop.is_set():
                    return
                report.finished(point.key, store.compute(point, run_point), bar)
            if task_done is not None:
                task_done(report)
        return
    queue = deque(jobs)
    deaths: dict[str, int] = {}
    try:
        pool += _take_workers(workers - len(pool), report_of(jobs))
        while queue or any(w.task for w in pool):
            if stop is not None and stop.is_set():
                return
            for w in pool:
                if w.task is None and queue:
                    store, report, task = queue.popleft()
                    w.task, w.job = list(task), (store, report)
                    w.conn.send((str(store.root), w.task))
            wait([w.conn for w in pool] + [w.proc.sentinel for w in pool], timeout=1.0)
            alive = []
            for w in pool:
                _drain(w, bar, task_done)
                if w.proc.exitcode is None:
                    alive.append(w)
                    continue
                if w.task:  # died with unfinished points; the first was being computed
                    store, report = w.job
                    key = w.task[0].key
                    deaths[key] = deaths.get(key, 0) + 1
                    rest = w.task
                    if deaths[key] >= MAX_DEATHS:
                        store.write(key, _dead_record(w.task[0], w.proc.exitcode))
                        bar.update(1)
                        rest = w.task[1:]
                    if rest:
                        queue.appendleft((store, report, rest))
                    elif task_done is not None:
                        task_done(report)
                    fate = "re-queued" if deaths[key] < MAX_DEATHS else f"recorded {key} as failed"
                    report.messages.append(
                        f"a worker died (exit code {w.proc.exitcode}) with {len(w.task)} point(s) "
                        f"unfinished; {fate}"
                    )
                w.conn.close()
                if queue:
                    alive.extend(_take_workers(1, report_of(queue)))
            pool = alive
    finally:
        _release(pool)  # on Ctrl-C busy workers are terminated, and idle ones stop or stay in the block


def report_of(jobs) -> SweepReport:
    """The report that counts the workers a list of jobs starts (its first job's)."""
    return jobs[0][1]


def _drain(w: _Worker, bar, task_done: Callable[[SweepReport], None] | None = None) -> None:
    """Read every message a worker has sent."""
    try:
        while w.task is not None and w.conn.poll():
            msg = w.conn.recv()
            report = w.job[1]
            if msg[0] == "done":
                w.task = [t for t in w.task if t[0] != msg[1]]
                report.finished(msg[1], msg[2], bar)
            elif msg[0] == "idle":
                w.task = None
                if task_done is not None:
                    task_done(report)
            elif msg[0] == "write-error":
                raise WriteError(msg[1])
    except (EOFError, OSError):
        pass


def _dead_record(task: Task, exitcode: int | None) -> dict:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in signal.valid_signals() else str(-exitcode)
        why = f"killed by {name}" + (
            " (the out-of-memory killer sends it, as can a user)" if name == "SIGKILL" else ""
        )
    else:
        why = f"exit code {exitcode}"
    rec = _failed_record(task.config, f"the worker computing this point died {MAX_DEATHS} times ({why})")
    rec["key"] = task.key
    if task.data is not None:
        rec["data_id"] = task.data_id
    return rec


def _stop(pool: list[_Worker], idle_exit: bool = True) -> None:
    """Ask idle workers to exit (``idle_exit``; else terminate them too: one may
    still be loading its kernels, with nothing to clean up); terminate busy
    ones (Ctrl-C): they unwind and remove their temporary files; anything
    still alive after 5 s is killed, and a lock file a stopped worker left is removed."""
    for w in pool:
        if w.proc.exitcode is None:
            if w.task or not idle_exit:
                w.proc.terminate()
            else:
                with contextlib.suppress(OSError):
                    w.conn.send(None)
    deadline = time.monotonic() + 5.0
    for w in pool:
        w.proc.join(max(0.0, deadline - time.monotonic()))
        if w.proc.exitcode is None:
            w.proc.kill()
            w.proc.join()
        w.conn.close()
        if w.task and w.job is not None:  # the point it was computing: no lock file left behind
            w.job[0].drop_stale_lock(w.task[0].key)


def worker_identity() -> dict:
    """What a remote worker runs: attnsim's version and revision (a cluster mixing them
    would mix results), and its interpreter."""
    import sys  # lazy: as the two below

    from .._meta import __version__  # lazy: run on the worker, by name
    from ..results import git_revision  # lazy: as above

    return {"attnsim": __version__, "git": dict(git_revision()), "python": sys.version.split()[0]}


_IN_PROCESS = threading.Lock()  # an executor's threads inside the sweep's own process: one point at a time


def run_remote(task: Task, parent: int | None = None) -> tuple[str, dict]:
    """One point as an Executor's task. In another process (a Dask worker, a process pool):
    one thread for Numba, BLAS and attnsim's own pools, as the local workers (a worker shares
    its machine with others; every BLAS call of a point then runs on one thread, whatever
    another thread of the worker computes beside it), the point in its thread's own workspace.
    On a thread of the sweep's own process ``parent`` (a ThreadPoolExecutor): nothing of the
    caller's process is pinned, and its points run one at a time (a run's BLAS limits are
    the process's; two runs setting them at once would move each other's numbers)."""
    if parent is not None and parent == os.getpid():
        with _IN_PROCESS:
            return task.key, stamped(task, run_point(task.config, task.save, task.data))
    pin_one_thread()
    return task.key, stamped(task, run_point(task.config, task.save, task.data))


def _run_executor(tasks, store: Store, bar, executor, report: SweepReport) -> None:
    """Every point as its own task on ``executor`` (any concurrent.futures.Executor:
    dask.distributed's ``client.get_executor()``, mpi4py.futures, submitit, a process
    pool), so a dead worker loses one point: a point whose task raised (Dask's
    KilledWorker after its own retries, a broken pool) gets a failed record naming why
    and the sweep goes on (a rerun retries it)."""
    from concurrent.futures import Future, as_completed  # lazy: only remote sweeps wait on futures

    futures = {}
    for group in tasks:
        for t in group:
            fut = executor.submit(run_remote, t, os.getpid())
            if not isinstance(fut, Future):
                raise ConfigError(
                    f"executor: its submit returned {type(fut).__name__}, not a concurrent.futures.Future"
                )
            futures[fut] = t
    for fut in as_completed(futures):
        task = futures[fut]
        try:
            key, rec = fut.result()
        except Exception as exc:  # noqa: BLE001  (a worker's death or the executor's error: recorded)
            key = task.key
            why = f"{type(exc).__name__}: {exc}".strip()
            rec = stamped(task, _failed_record(task.config, f"the worker computing it failed ({why})"))
        store.write(key, rec)
        report.finished(key, rec.get("status") == "ok", bar)


def check_workers(identities: list[dict]) -> None:
    """ConfigError unless every worker runs this attnsim (version and revision)."""
    here = worker_identity()
    for ident in identities:
        theirs, ours = (ident.get("git") or {}).get("revision"), here["git"].get("revision")
        if ident.get("attnsim") != here["attnsim"] or theirs != ours:
            raise ConfigError(
                f"--scheduler: a worker runs attnsim {ident.get('attnsim')} at revision {theirs}, this "
                f"process {here['attnsim']} at {ours}: a mixed cluster would mix results; install one "
                "attnsim everywhere"
            )


def dask_executor(client) -> Any:
    """The Dask client as a concurrent.futures Executor, after checking its workers."""
    check_workers(list(client.run(worker_identity).values()))
    return client.get_executor(pure=False)


def _connect(scheduler: str):
    try:
        from distributed import Client  # optional dependency (the dask extra)
    except ImportError:
        raise ConfigError("--scheduler: needs dask; pip install 'attnsim[dask]'") from None
    scheme = scheduler.split("://", 1)[0].lower() if "://" in scheduler else "tcp"
    if scheme not in ("tcp", "tls", "ws", "wss"):
        raise ConfigError(
            f"--scheduler: {scheduler!r}: attnsim connects to a Dask scheduler over tcp://, tls://, ws:// "
            f"or wss://, not {scheme}://"
        )
    try:
        if scheme == "tcp":
            _refused(scheduler)
        return Client(scheduler, timeout=10)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"--scheduler: cannot connect to {scheduler!r} ({type(exc).__name__}: {exc})"
        ) from None


def _refused(scheduler: str) -> None:
    """Raise ConnectionRefusedError at once when nothing listens at a tcp:// address (Dask's
    client retries a refused connection until its timeout, 10 s); anything else is left to it."""
    import socket  # lazy: only --scheduler gets here

    host, _, port = scheduler.split("://", 1)[-1].rstrip("/").rpartition(":")
    if not port.isdigit():
        return  # no port given: the client's default, its own errors
    host = host.strip("[]") or "127.0.0.1"
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except ConnectionRefusedError:
        raise
    except OSError:
        return  # unresolved, unreachable or slow: the client's timeout and message
