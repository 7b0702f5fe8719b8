"""The process's caches, owned by one object.

Everything attnsim caches between runs of one process lives in a
:class:`Workspace`: the reduced engine's setups (a sweep's points that differ
only in signal strength share one), the reused d x d buffer for W(0), the kept
draws of W(0) (sweep workers turn them on), the population metrics' points and
populations, the Bayes errors, which kernels are warm. A run takes the
workspace it is given (``simulate(..., workspace=)``; default: the process's
:data:`WORKSPACE`), so a caller can run in a fresh one or
:meth:`Workspace.clear` it. What belongs to the process itself, its threads
(the pools, each thread's scratch arrays, the idle sweep workers), is the one
:data:`PROCESS`; nothing else in the package keeps state.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Any

import numpy as np

DRAW_CHUNK = 1 << 18  # kept draws record the generator's state every this many numbers (2 MB)
SETUP_CACHE_SIZE = 4  # reduced setups kept per process (sweeps share them across signal strengths)
POINTS_CACHE_SIZE = 16  # population point sets and populations kept per process


class KeptDraws:
    """The numbers one stream draws from one state for W(0), kept so that a
    later W(0) drawn from the same state reads them instead.

    A sweep over d with one seed draws W(0) for every d from the same ``init``
    stream state, and W(0) of dimension d is the first d^2 numbers of that
    stream (standard normals or uniforms), scaled for d: the largest d draws
    them, every smaller one reads a prefix. The generator's state is recorded
    every ``DRAW_CHUNK`` numbers, so the stream is left exactly after any
    prefix (at most one chunk is drawn again, and checked against the kept
    numbers). Off unless ``enabled`` (sweep workers turn it on); at most
    ``max_bytes`` are kept, of one stream state and kind at a time.
    """

    KINDS = {"gaussian": "standard_normal", "kaiming_uniform": "random"}

    def __init__(self, max_bytes: int):
        self.enabled = False
        self.max_bytes = max_bytes
        self._key: tuple | None = None
        self._values = np.empty(0)
        self._states: list[dict] = []  # the state after j * DRAW_CHUNK numbers, j = 0, 1, ...

    @property
    def size(self) -> int:
        """How many numbers are kept (a whole number of chunks)."""
        return int(self._values.size)

    def take(self, rng: np.random.Generator, n: int, init_W: str) -> np.ndarray | None:
        """The next ``n`` numbers W(0) with ``init_W`` draws from ``rng`` (a view,
        valid until the next call), ``rng`` left after them as the draw would
        leave it; None (nothing drawn) when not enabled, for another init, or
        for more than ``max_bytes``."""
        method = self.KINDS.get(init_W)
        if not self.enabled or method is None or 8 * n > self.max_bytes:
            return None
        bg = rng.bit_generator
        key = (method, type(bg).__name__, repr(bg.state))
        if key != self._key:
            self._key, self._values, self._states = None, np.empty(0), [bg.state]
        draw = getattr(rng, method)
        if n > self._values.size:
            self._extend(rng, draw, n)
        self._key = key
        j = n // DRAW_CHUNK
        bg.state = self._states[j]
        rest = n - j * DRAW_CHUNK
        if rest and not np.array_equal(draw(rest), self._values[n - rest : n]):
            raise RuntimeError("kept draws do not match their stream")  # pragma: no cover
        return self._values[:n]

    def _extend(self, rng: np.random.Generator, draw, n: int) -> None:
        have = self._values.size  # a multiple of the chunk
        values = np.empty(-(-n // DRAW_CHUNK) * DRAW_CHUNK)
        values[:have] = self._values
        self._values = np.empty(0)
        rng.bit_generator.state = self._states[-1]
        for lo in range(have, values.size, DRAW_CHUNK):
            draw(out=values[lo : lo + DRAW_CHUNK])
            self._states.append(rng.bit_generator.state)
        self._values = values


class KeptRun:
    """The exact run of the last point trained beside a precision twin, kept so that
    the next point of the same config with another twin format (a sweep over
    ``precision_twin``: figure 17 runs float32 and bfloat16 beside each exact run)
    trains its twin alone: the exact run does not depend on its twin (the same bits
    beside either format). Off unless ``enabled`` (sweep workers turn it on); one run
    at a time, copied in and out (a run's record changes the arrays it is given)."""

    def __init__(self) -> None:
        self.enabled = False
        self._key: str | None = None
        self._value: Any = None

    def take(self, key: str) -> Any:
        """A copy of the run kept under ``key``, or None."""
        return copy.deepcopy(self._value) if self.enabled and key == self._key else None

    def keep(self, key: str, value: Any) -> None:
        if self.enabled:
            self._key, self._value = key, copy.deepcopy(value)

    def clear(self) -> None:
        self._key = self._value = None


class SteppingBeside:
    """The twins stepping beside their runs on threads of their own (:class:`attnsim.runtime.threads.Beside`):
    while any does, the background queue's jobs (a run's population metrics) wait. The run and its twin
    then have the two cores; a third thread beside them took turns with both, and the GIL with them, and
    its evaluations took three to four times their own time. A twin stops holding the queue when it
    collects its evaluations or ends; the threads that collect take queued jobs themselves meanwhile."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._holds = 0
        self._mine = threading.local()

    def hold(self) -> None:
        """One more twin about to step (called before its thread starts: no job slips in first)."""
        with self._cond:
            self._holds += 1

    def own(self) -> None:
        """The calling thread is the twin that :meth:`hold` counted."""
        self._mine.held = True

    def done(self) -> None:
        """The calling thread steps no more: its hold goes, once (nothing on any other thread)."""
        if getattr(self._mine, "held", False):
            self._mine.held = False
            self.release()

    def release(self) -> None:
        with self._cond:
            self._holds -= 1
            if not self._holds:
                self._cond.notify_all()

    def wait(self) -> None:
        """Until no twin steps."""
        with self._cond:
            while self._holds:
                self._cond.wait()


class Process:
    """What belongs to the process, not to a workspace: its threads and what they hold.

    The thread pools (by size, made on first use), each thread's reused scratch
    arrays of the population kernels (``work``: memory, never results), and the idle
    sweep worker processes kept inside ``worker_pool()`` blocks. Two workspaces in
    one process share these: they hold no results, so sharing cannot leak one
    run's numbers into another's.
    """

    def __init__(self) -> None:
        self.executors: dict = {}
        self.idle_workers: list | None = None
        self.work = threading.local()
        self.beside = SteppingBeside()
        self.forked = False  # a forked child: no Numba threading layer (GNU OpenMP cannot run after fork)
        self.evaluation_s = 0.0  # CPU seconds of evaluations so far (a run reports its own: the difference)
        self._counting = threading.Lock()

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """Count the CPU time of the enclosed work, on the thread that runs it, in
        :attr:`evaluation_s` (a run's population metrics and test sets, wherever they run)."""
        t = time.thread_time()
        try:
            yield
        finally:
            spent = time.thread_time() - t
            with self._counting:
                self.evaluation_s += spent

    def after_fork(self) -> None:
        """In a forked child: fork copies no thread, so the parent's pools would take jobs
        no thread ever runs (the child's first population evaluation waited for ever);
        the child makes its own pools on first use, has no sweep workers of its own, and
        runs the parallel kernels' chunks one after another (the same numbers: GNU
        OpenMP, Numba's threading layer here, terminates a child that uses it)."""
        self.executors = {}
        self.idle_workers = None
        self.work = threading.local()
        self.beside = SteppingBeside()  # the parent's twins are not the child's
        self.forked = True


PROCESS = Process()  # the process's threads and their scratch arrays
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=PROCESS.after_fork)


class Workspace:
    """The caches of one process (see the module docstring); :meth:`clear` empties them.

    A fresh ``Workspace()`` shares nothing with another but the :data:`PROCESS`'s
    threads; what each caches, a run in it fills and reads alone.
    """

    def __init__(self) -> None:
        self.kept_draws = KeptDraws(max_bytes=256 * 1024**2)  # W(0) up to d = 5792, as the setup keeps it
        self.kept_run = KeptRun()
        self.clear()

    def clear(self) -> None:
        """Drop every cached setup, buffer and point set (whether W(0) draws and exact runs
        are kept, switches sweep workers turn on, stays as it was; what they hold goes)."""
        self.setups: OrderedDict = OrderedDict()  # reduced setups of generated data, by setup key
        self.w0 = np.empty(0)  # the reused d x d W(0) buffer (flat)
        enabled = self.kept_draws.enabled
        self.kept_draws = KeptDraws(max_bytes=self.kept_draws.max_bytes)
        self.kept_draws.enabled = enabled
        self.kept_run.clear()
        self.points: dict = {}  # population points by (seed, T, points)
        self.populations: dict = {}  # populations by their arguments
        self.bayes: dict = {}  # Bayes errors of data models, by their arguments
        self.warm: set[str] = set()  # integrators whose kernels are loaded and warmed up

    def remember(self, cache: dict, key: Hashable, value: Any, size: int = POINTS_CACHE_SIZE) -> Any:
        """``cache[key] = value``, emptying ``cache`` first when it holds more than ``size``."""
        if len(cache) > size:
            cache.clear()
        cache[key] = value
        return value


WORKSPACE = Workspace()  # the process's workspace: what a run uses unless given another
