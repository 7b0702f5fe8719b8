"""The driver: owns the schedule, the log grid and the snapshots.

A model supplies a *stepper* (:class:`attnsim.models.base.Stepper`): it
advances its state k steps in place (gradient-descent steps, or a gradient
flow over the same span of time), shows the current state on the training set
and hands out its parameters. An *evaluator* measures a state on fresh data.
What is recorded at each log point is the business of a *recorder* handed to
:func:`run` (as diffrax's ``SaveAt(fn=...)``): :class:`attnsim.observers.Recorder`
keeps the paper's metrics. The driver knows nothing of any model or metric, so
every model runs through :func:`run`.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ._meta import SimulationError
from .models.base import Evaluator, Outcome, Stepper
from .runtime.resources import tqdm_class
from .runtime.threads import stepping_done

PROGRESS_CHUNK = 20_000  # most GD steps per kernel call while progress may show (flows are never cut)


class Recorder(Protocol):
    """What the driver hands each log point to (see :class:`attnsim.observers.Recorder`)."""

    def record(self, j: int, step: int, stepper: Stepper, evaluated: dict) -> None: ...

    def add(self, j: int, evaluated: dict) -> None: ...

    def frozen(self, stepper: Stepper, step: int) -> str: ...

    def finish(self, stepper: Stepper, steps: int) -> tuple[dict[str, np.ndarray], np.ndarray, list[str]]: ...


def log_grid(steps: int, log_scale: str, log_every: int, log_points: int) -> np.ndarray:
    """Logged steps: always 0 and ``steps``; linear (every ``log_every``) or geometric
    (``log_points`` in all) in between."""
    if log_scale == "linear":
        grid = np.arange(0, steps + 1, log_every)
    else:
        grid = np.geomspace(1, max(steps, 1), log_points - 1).round()
    return np.unique(np.concatenate([[0, steps], grid]).astype(np.int64))


def pop_indices(n_log: int, pop_log_points: int) -> np.ndarray:
    """Indices into the log grid where population metrics are evaluated:
    at most ``pop_log_points``, evenly spread, first and last included."""
    m = min(n_log, pop_log_points)
    return np.unique(np.linspace(0, n_log - 1, m).round().astype(np.int64))


@dataclass
class Trajectory:
    """Metrics over the log grid (arrays of length L = number of log points),
    plus per-sample end-of-run records."""

    arrays: dict[str, np.ndarray]
    fit_step: np.ndarray
    status: str = "ok"
    frozen_at: int | None = None
    warnings: list[str] = field(default_factory=list)
    state: dict[str, np.ndarray] = field(default_factory=dict)
    refined: dict[str, float | None] = field(default_factory=dict)  # times located between log points
    snapshots: dict[int, Any] = field(default_factory=dict)  # states at the evaluated log points (in memory)


@dataclass(frozen=True)
class Schedule:
    """When a run does what: the log grid (steps, 0 and the last included), the log
    points with evaluations (indices into it), the step size (named in a divergence
    message), whether a progress bar is shown (None: on a terminal), whether it
    counts decades (a flow on a log grid; discrete steps' bars count steps), and an
    event that stops the walk between chunks (``stop``: a twin whose run ended)."""

    grid: np.ndarray
    evaluate_at: Sequence[int] = ()
    lr: float | None = None
    progress: bool | None = None
    log_bar: bool = False
    stop: Any = None


def run(
    stepper: Stepper,
    recorder: Recorder,
    schedule: Schedule,
    evaluate: Evaluator | None = None,
    watch: Callable[[dict], None] | None = None,
    snapshots: bool = False,
) -> Trajectory:
    """Advance ``stepper`` along ``schedule.grid``, handing every log point to
    ``recorder``; ``evaluate`` runs at ``schedule.evaluate_at`` (through its ``defer``
    on a second thread while the steps go on, unless ``snapshots`` are kept),
    ``watch`` (if given) sees the parameters at every log point. With ``snapshots``
    the state at each evaluated log point is kept for :func:`refine_crossing`."""
    grid = schedule.grid
    steps = int(grid[-1])
    at = set(schedule.evaluate_at) if evaluate is not None else set()
    defer = None if snapshots or evaluate is None else evaluate.defer
    pending: list[tuple[int, object]] = []  # (log point, job) of deferred evaluations
    snaps: dict[int, object] = {}
    # a flow is integrated whole between log points and reports its progress from the
    # solver's own steps; discrete steps get their bar from the walk, once they take time
    bar = _progress_bar(steps, schedule.progress, schedule.log_bar) if stepper.whole_spans else None
    if bar is not None:
        stepper.progress = bar.to
    walk = _Walk(stepper, recorder, bar, schedule)
    try:
        for j, target in enumerate(grid):
            walk.to(int(target))
            evaluated, job = {}, None
            if j in at and defer is not None:
                job = defer(stepper.state())
            elif j in at:
                with np.errstate(over="ignore", invalid="ignore"):
                    evaluated = evaluate(stepper.state())
            recorder.record(j, int(target), stepper, evaluated)
            if job is not None:
                pending.append((j, job))
            if watch is not None:
                watch(stepper.state())
            if snapshots and j in at:
                snaps[int(target)] = stepper.snapshot()
        _collect(recorder, pending)
    except SimulationError:
        _collect(recorder, pending)  # an overflow at an earlier log point is the one to report
        raise
    finally:
        for _, job in pending:
            job.cancel()
        if walk.bar is not None:
            walk.bar.close()
        if stepper.whole_spans:
            stepper.progress = None
    arrays, fit, recorded_warnings = recorder.finish(stepper, steps)
    return Trajectory(
        arrays=arrays,
        fit_step=fit,
        status="frozen" if walk.frozen_at is not None else "ok",
        frozen_at=walk.frozen_at,
        warnings=walk.warnings + (recorded_warnings if walk.frozen_at is None else []),
        # no step follows but a refinement's (from the snapshots): the stepper's own arrays will do
        state=stepper.final_state() if snapshots else stepper.state(),
        snapshots=snaps,
    )


class _Walk:
    """The stepper's way along the grid: advancing to each log point, stopping with the
    run's message at an outcome that ends it. Discrete steps go in chunks that double
    while a chunk takes under a tenth of a second (exact in any chunks): a signal is
    handled, and a stop event seen, within about that long (a compiled kernel runs no
    handler until it returns). Unless progress is off, a progress bar appears once the
    steps have taken a second, whatever their count or their optimizer's cost (AdamW in
    the dense engine, the encoder)."""

    def __init__(self, stepper: Stepper, recorder: Recorder, bar: _Bar | None, schedule: Schedule):
        self.stepper, self.recorder, self.bar, self.lr = stepper, recorder, bar, schedule.lr
        self.schedule = schedule
        self.step = 0
        self.frozen_at: int | None = None
        self.warnings: list[str] = []
        self.lazy = not stepper.whole_spans
        self.chunk = 16 if self.lazy else None
        self.shows = schedule.progress is not False
        self.t0 = time.monotonic()

    def _grow(self, took: float) -> None:
        """The next chunk's size, and the bar once the steps have taken a second."""
        if took < 0.1:
            self.chunk = min(2 * self.chunk, PROGRESS_CHUNK)
        elif took > 0.2:  # the machine got busier: a signal still waits a tenth of a second or so
            self.chunk = max(1, self.chunk // 2)
        steps = int(self.schedule.grid[-1])
        if self.bar is None and self.shows and time.monotonic() - self.t0 > 1.0 and self.step < steps:
            # discrete steps cost the same each, on a log grid too: the bar counts steps, so its
            # estimate of the time left holds (a flow's bar counts decades, where its time goes)
            self.bar = _Bar(steps, self.schedule.progress, log=False)

    def to(self, target: int) -> None:
        while self.frozen_at is None and self.step < target:
            if self.schedule.stop is not None and self.schedule.stop.is_set():
                raise SimulationError(f"stopped at step {self.step} (its run ended)")
            chunk = target - self.step if self.chunk is None else min(target - self.step, self.chunk)
            t = time.monotonic()
            status, reached = self.stepper.advance(self.step, chunk)
            if self.lazy:
                self._grow(time.monotonic() - t)
            if status in (Outcome.DIVERGED, Outcome.STALLED):
                raise SimulationError(status.message(reached, lr=self.lr, detail=self.stepper.detail))
            if status is Outcome.FROZEN:
                self.frozen_at = reached
                msg = self.recorder.frozen(self.stepper, reached)
                self.warnings.append(msg)
                if not getattr(self.recorder, "quiet", False):
                    warnings.warn(msg, stacklevel=4)
                return
            if self.bar is not None:
                self.bar.to(reached)
            self.step = reached


def _collect(rec: Recorder, pending: list) -> None:
    """Add the deferred evaluations to their rows, in log order (a metric that
    overflowed raises SimulationError naming its step). The steps are done: the
    background jobs may go on if they waited for this thread (a twin's)."""
    stepping_done()
    while pending:
        j, job = pending.pop(0)
        try:
            rec.add(j, job.result())
        except SimulationError:
            pending.clear()  # the later ones do not matter
            raise


def refine_crossing(
    stepper: Stepper, snap: Any, a: float, b: float, g: Callable[[dict], float], integer: bool
) -> float:
    """The step in (a, b] where g(state) changes sign, g(a) < 0 <= g(b), by
    bisection: the stepper restarts from ``snap`` (its state at step a) and
    advances to each trial step. GD steps are integers (the exact first step
    with g >= 0); flow steps are real (to a relative 1e-6)."""

    def value(step: float) -> float:
        stepper.restore(snap)
        if step > a:
            status, reached = stepper.advance(a, step - a)
            if status in (Outcome.DIVERGED, Outcome.STALLED):  # went through once: a second time should too
                raise SimulationError(status.message(reached, detail=stepper.detail))
        with np.errstate(over="ignore", invalid="ignore"):
            return g(stepper.state())

    if integer:
        a, b = int(a), int(b)
    lo, hi = a, b
    while (hi - lo > 1) if integer else (hi - lo > 1e-6 * hi):
        mid = (lo + hi) // 2 if integer else math.sqrt(lo * hi) if lo > 0 else 0.5 * hi
        if integer:
            mid = int(mid)
        if value(mid) >= 0.0:
            hi = mid
        else:
            lo = mid
    return hi


class _Bar:
    """A progress bar over steps, or over decades of steps for a log grid
    (position log10(1 + step): a flow to 1e14 spends its time evenly per
    decade), moved to absolute positions."""

    def __init__(self, steps: int, progress: bool | None, log: bool):
        tqdm = tqdm_class(progress)

        self.log = log
        total = math.log10(1.0 + steps) if log else steps
        fmt = "{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]"
        self._bar = tqdm(total=total, bar_format=fmt, disable=None if progress is None else not progress)
        self._bar.set_description_str(f"step 0 of {steps:.3g}", refresh=False)
        self.steps = steps
        self._shown = 0.0

    def to(self, step: float) -> None:
        bar = self._bar
        now = time.monotonic()
        if bar.disable or now - self._shown < 0.1:  # redrawn at most ten times a second
            return
        self._shown = now
        bar.n = math.log10(1.0 + step) if self.log else step
        bar.set_description_str(f"step {step:.3g} of {self.steps:.3g}")

    def close(self) -> None:
        bar = self._bar
        if not bar.disable:
            bar.n = bar.total
            bar.set_description_str(f"step {self.steps:.3g} of {self.steps:.3g}", refresh=False)
        bar.close()


def _progress_bar(steps: int, progress: bool | None, log: bool) -> _Bar | None:
    if progress is False or steps < 10 * PROGRESS_CHUNK:
        return None
    return _Bar(steps, progress, log)


__all__ = [
    "Recorder",
    "Schedule",
    "SimulationError",
    "Trajectory",
    "log_grid",
    "pop_indices",
    "refine_crossing",
    "run",
]
