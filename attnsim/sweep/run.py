"""Running a sweep: its points grouped by shared setup, ordered by cost, handed to the executors."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import registry
from .._meta import ConfigError
from ..config import Config
from ..precision import without_twin
from ..results import atomic_write
from ..runtime.resources import format_bytes, physical_memory, tqdm_class
from .executors import _connect, _release, _run_executor, _run_local, _take_workers, _Worker, dask_executor
from .point import setup_group
from .spec import SweepSpec, Task, record_key
from .store import Store, SweepReport
from .tables import _flat, keep_table, spec_digest, write_csv

TAIL_POINTS = 8  # points per task of a setup group whose setup is cheap (see _chunks)


def run_sweep(
    spec: SweepSpec,
    out: str | Path = "sweeps",
    workers: int | None = None,
    scheduler: str | None = None,
    client: Any = None,
    progress: bool | None = None,
    executor: Any = None,
) -> SweepReport:
    """Run every unfinished point of ``spec``; returns a :class:`SweepReport`.

    workers: local processes (default: the number of cores, never more than
    there are tasks; one task runs in this process). scheduler / client: a
    Dask distributed scheduler address or Client, used instead of local
    processes. executor: any ``concurrent.futures.Executor`` instead (a
    process pool, ``mpi4py.futures``, ``submitit``, a Dask client's
    ``get_executor()``). Remote points run one per task, so a worker that dies
    loses one point; each record is written here as its point finishes, and a
    point whose task raised (Dask's ``KilledWorker``) is recorded as failed.
    """
    tqdm = tqdm_class(progress)

    remote = [name for name, v in (("scheduler", scheduler), ("client", client), ("executor", executor)) if v]
    if workers is not None and remote:
        raise ConfigError(
            f"workers: sets the local worker processes; with {remote[0]} the executor's workers run the "
            "points (leave workers unset)"
        )
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise ConfigError(
            f"executor: expected a concurrent.futures.Executor (an object with submit), got "
            f"{type(executor).__name__}"
        )
    if scheduler is not None and client is None:
        client = _connect(scheduler)  # before anything is written
    own_client = scheduler is not None
    if client is not None and executor is None:
        executor = dask_executor(client)  # checks that every worker runs this attnsim
    started: list[_Worker] = []
    claims = contextlib.ExitStack()
    try:
        n = workers or os.cpu_count() or 1
        plan = _Plan(spec, out, claims)
        if executor is None and n > 1 and plan.missing and spec.data is None:
            n = _workers_that_fit(plan.points, n, plan.report)
        # many records to compute: the workers start loading now, while the records are read and sorted
        if executor is None and n > 1 and plan.missing >= 4 * n:
            started = _take_workers(n, plan.report)
        plan.schedule(n)
        bar = tqdm(
            total=plan.report.scheduled,
            unit="run",
            desc=spec.name,
            disable=None if progress is None else not progress,
        )
        try:
            if executor is not None:
                _run_executor([t for _, t in plan.tasks], plan.store, bar, executor, plan.report)
            else:
                handed, started = started, []  # _run_local releases them
                jobs = [(plan.store, plan.report, t) for _, t in plan.tasks]
                _run_local(jobs, bar, min(n, len(jobs)), handed)
        finally:
            bar.close()
        return plan.finish()
    finally:
        _release(started)
        if own_client:
            client.close()
        claims.close()


def run_sweeps(
    specs: list[tuple[SweepSpec, str | Path]],
    workers: int | None = None,
    progress: bool | None = None,
    on_done: Callable[[int], None] | None = None,
    stop: threading.Event | None = None,
) -> list[SweepReport]:
    """Several sweeps (each with its output folder) on one pool of local workers: every
    unfinished point of all of them queued together, the costliest tasks first whichever
    sweep they belong to, so no core waits for one sweep's last long point while another
    sweep has work. ``on_done(i)`` is called (on this thread) once the i-th sweep has no
    point left to compute; ``stop`` set: the sweeps stop at once (busy workers terminated,
    their points left for a rerun). Returns the reports, as :func:`run_sweep`'s."""
    n = workers or os.cpu_count() or 1
    with contextlib.ExitStack() as claims:
        plans = [_Plan(spec, out, claims) for spec, out in specs]
        return _run_plans(plans, n, progress, on_done, stop)


def _run_plans(
    plans: list[_Plan],
    n: int,
    progress: bool | None,
    on_done: Callable[[int], None] | None,
    stop: threading.Event | None,
) -> list[SweepReport]:
    """run_sweeps' work once every sweep has claimed its folder."""
    tqdm = tqdm_class(progress)

    local = [p for p in plans if p.spec.data is None and p.missing]
    if n > 1 and local:
        n = _workers_that_fit([c for p in local for c in p.points], n, local[0].report)
    total = sum(p.group() for p in plans)
    for p in plans:  # a group of a small share of all the work stays whole: one setup, not one per worker
        p.split(n, whole_below=total / (4 * n))
    order = sorted(
        ((cost, i, task) for i, p in enumerate(plans) for cost, task in p.tasks), key=lambda job: -job[0]
    )
    jobs = [(plans[i].store, plans[i].report, task) for _, i, task in order]
    left = [len(p.tasks) for p in plans]
    for i, count in enumerate(left):
        if count == 0 and on_done is not None:
            on_done(i)
    index = {id(p.report): i for i, p in enumerate(plans)}

    def task_done(report: SweepReport) -> None:
        i = index[id(report)]
        left[i] -= 1
        if left[i] == 0 and on_done is not None:
            on_done(i)

    quiet = None if progress is None else not progress
    bar = tqdm(total=len(jobs), unit="task", desc="sweeps", disable=quiet)
    try:
        _run_local(jobs, bar, min(n, len(jobs)), [], task_done=task_done, stop=stop)
    finally:
        bar.close()
    return [p.finish() for p in plans]


class _Plan:
    """One sweep's unfinished points, grouped by shared setup and split into tasks with
    their estimated cost (:meth:`schedule`), and the report :meth:`finish` completes."""

    def __init__(self, spec: SweepSpec, out: str | Path, claims: contextlib.ExitStack):
        self.spec = spec
        self.store = Store(Path(out) / spec.name, spec.data_id)
        text = json.dumps(spec.to_dict(), indent=2)
        claims.enter_context(self.store.computing(spec_digest(spec)))
        _write_spec(self.store, text)
        self.points = spec.points()
        self.keys = [record_key(c, spec.data_id) for c in self.points]
        self.report = SweepReport(self.store, self.keys)
        self.missing = len(set(self.keys) - self.store.keys())
        self.tasks: list[tuple[float, list[Task]]] = []

    def schedule(self, workers: int, whole_below: float = 0.0) -> None:
        """The tasks of the points without a good record (retried ones counted), each
        with its estimated flops, costliest setup groups first; a group whose work (setup
        and points) is below ``whole_below`` flops stays one task, its setup built once
        (:func:`run_sweeps`: there is other work to keep the cores busy)."""
        self.group()
        self.split(workers, whole_below)

    def group(self) -> float:
        """The points without a good record by setup group, with the flops of each group's
        setup and points; returns the plan's total."""
        spec, store = self.spec, self.store
        before = {k: store.read(k) for k in self.keys}
        self.report.retried = sum(1 for r in before.values() if r is not None and r.get("status") != "ok")
        groups: dict[tuple, list] = {}
        setup: dict[tuple, float] = {}  # flops of each group's setup and of its points' steps
        steps: dict[tuple, float] = {}
        for key, cfg in zip(self.keys, self.points):
            rec = before[key]
            if rec is None or rec.get("status") != "ok":
                task = Task(key, cfg.to_dict(resolved=False), spec.save, spec.data, spec.data_id)
                group = setup_group(cfg)
                groups.setdefault(group, []).append(task)
                setup.setdefault(group, registry.spec(cfg.model).setup_flops(cfg, cfg.engine))
                steps[group] = steps.get(group, 0.0) + _flops(cfg, spec.data)
        self._groups = (groups, setup, steps)
        return sum(setup.values()) + sum(steps.values())

    def split(self, workers: int, whole_below: float = 0.0) -> None:
        """The groups as tasks, costliest setup groups first (the last tasks to finish are
        short ones): split so every worker has work (:func:`_chunks`), unless a group's work
        is below ``whole_below``."""
        groups, setup, steps = self._groups
        order = sorted(groups, key=lambda g: -(setup[g] + steps[g]))
        for g in order:
            per = steps[g] / len(groups[g])
            whole = setup[g] + steps[g] < whole_below
            tasks = _runs_together(groups[g])
            parts = [tasks] if whole else _chunks(tasks, len(self.keys), workers, setup[g], per, run_key)
            for part in parts:
                self.tasks.append((setup[g] + per * len(part), part))
        self.report.scheduled = sum(len(t) for _, t in self.tasks)
        self.report.final = {}  # filled as points finish (SweepReport.finished)

    def finish(self) -> SweepReport:
        """The report with every record as the sweep ended, its messages and records.csv."""
        report, store = self.report, self.store
        done = report.final or {}
        final = report.final = {k: done[k] if k in done else store.read(k) for k in self.keys}
        report.ok = sum(1 for r in final.values() if r is not None and r.get("status") == "ok")
        report.failed = sum(1 for r in final.values() if r is not None and r.get("status") != "ok")
        if store.damaged:
            report.messages.append(
                f"moved {len(store.damaged)} damaged record(s) to {store.dir / 'damaged'} and recomputed "
                "them: " + ", ".join(sorted(set(store.damaged)))
            )
        if report.retried:
            report.messages.append(f"retried {report.retried} point(s) that had failed before")
        report.messages += _outcomes(final)
        rows = [_flat(r) for r in report.records()]
        write_csv(store, rows=rows)
        keep_table(report, self.spec, rows)
        return report


def _workers_that_fit(points: list[Config], n: int, report: SweepReport) -> int:
    """At most ``n`` local workers, and no more than fit in memory together when
    each computes the sweep's largest point (every point was checked alone when
    the sweep was read)."""
    need = max(sum(b for *_, b in _memory_estimate(c)) for c in points)
    have = physical_memory()
    fit = max(1, int(0.8 * have // need))
    if fit >= n:
        return n
    report.messages.append(
        f"running {fit} worker(s), not {n}: the largest point needs about {format_bytes(need)} of memory "
        f"and this machine has {format_bytes(have)}"
    )
    return fit


def _outcomes(final: dict[str, dict | None]) -> list[str]:
    """Each distinct reason points failed for, and each distinct warning of
    the records, once, with how many points it concerns."""
    failed: dict[str, int] = {}
    warned: dict[str, int] = {}
    for rec in final.values():
        if rec is None:
            continue
        if rec.get("status") != "ok":
            failed[rec.get("error", "?")] = failed.get(rec.get("error", "?"), 0) + 1
        for w in dict.fromkeys(rec.get("warnings") or []):
            warned[w] = warned.get(w, 0) + 1
    out = [f"{k} point(s) failed: {why}" for why, k in failed.items()]
    return out + [f"warning ({k} point(s)): {w}" for w, k in warned.items()]


def _write_spec(store: Store, text: str) -> None:
    """sweep.json describes the current grid (``text``, the spec as JSON); an earlier
    different grid's file is kept as sweep.<its hash>.json."""
    path = store.root / "sweep.json"
    if path.exists():
        old = path.read_bytes()
        if old == text.encode():
            return
        digest = hashlib.sha256(old).hexdigest()[:10]
        os.replace(path, store.root / f"sweep.{digest}.json")
    atomic_write(path, lambda fh: fh.write(text.encode()))


def _flops(cfg: Config, data: str | None) -> float:
    """Flops of a point's run after its setup (the model's ``run_flops``; for ordering the
    work only: with data, T and the engine are the config's guesses, the data decides them)."""
    spec = registry.spec(cfg.model)
    if data is not None:
        engine = "dense" if cfg.d <= cfg.n * cfg.T + 2 else "reduced"
        return spec.run_flops(cfg, engine)
    return spec.run_flops(cfg, spec.plan(cfg, user_data=False)[0])


def _memory_estimate(cfg: Config) -> list:
    spec = registry.spec(cfg.model)
    return spec.memory_estimate(cfg, spec.plan(cfg, user_data=False)[0])


def _chunks(
    group: list,
    total: int,
    workers: int,
    setup_flops: float = 0.0,
    point_flops: float = 0.0,
    key: Callable | None = None,
) -> list[list]:
    """Split a setup group so every worker has work (each part still shares
    its setup). A group whose setup costs at most a tenth of ``TAIL_POINTS``
    of its points goes in parts of ``TAIL_POINTS`` (each worker that takes a
    part builds the setup again): the cheap groups run last, and short last
    tasks keep one core from idling while the other finishes a long one. Neighbours of
    one ``key`` stay in one part (it then holds more than the others)."""
    size = max(1, math.ceil(total / max(1, 4 * workers)))
    if point_flops > 0 and setup_flops <= 0.1 * TAIL_POINTS * point_flops:
        size = min(size, TAIL_POINTS)
    parts: list[list] = [[]]
    for i, task in enumerate(group):  # twins of one exact run stay in one part (they share it)
        if len(parts[-1]) >= size and not (key is not None and key(group[i - 1]) == key(task)):
            parts.append([])
        parts[-1].append(task)
    return parts if group else []


def run_key(task: Task) -> str:
    """The exact run a point trains: points that differ only in their precision twin's
    keys share one (:class:`attnsim.runtime.workspace.KeptRun`: a worker trains it once
    when they come one after the other); any other point is its own."""
    if task.data is not None or task.config.get("precision_twin", "none") == "none":
        return task.key
    return json.dumps(without_twin(task.config), sort_keys=True, default=str)


def _runs_together(tasks: list[Task]) -> list[Task]:
    """``tasks`` with those of one exact run (:func:`run_key`) next to each other, in order."""
    first: dict[str, int] = {}
    for t in tasks:
        first.setdefault(run_key(t), len(first))
    return sorted(tasks, key=lambda t: first[run_key(t)])
