"""Two-way splits of NumPy and BLAS work that releases the GIL (the reduced
engine's setup products, the population metrics), and the BLAS thread limits.

The work is always cut into the same fixed pieces and the pieces are combined
in a fixed order, so results do not depend on how many cores run them; the
pieces run on two threads unless ``NUMBA_NUM_THREADS`` is 1 (sweep workers set
that, one process per core). The thread pools belong to the process
(:data:`attnsim.runtime.workspace.PROCESS`), not to a workspace.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from .workspace import PROCESS

if TYPE_CHECKING:  # names in annotations only
    from concurrent.futures import Future

    from threadpoolctl import ThreadpoolController


_ONE_THREAD = False  # set in a remote sweep worker (pin_one_thread): it shares its machine


def threads() -> int:
    """Threads for attnsim's two-way splits: 1 in a sweep worker or on one core, else 2."""
    one = _ONE_THREAD or os.environ.get("NUMBA_NUM_THREADS") == "1" or (os.cpu_count() or 1) == 1
    return 1 if one else 2


def pin_one_thread() -> None:
    """One thread for Numba, BLAS and attnsim's pools from now on in this process (a
    remote sweep worker, started by a cluster that does not set NUMBA_NUM_THREADS)."""
    global _ONE_THREAD
    if _ONE_THREAD:
        return
    _ONE_THREAD = True
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ.get("OPENBLAS_NUM_THREADS", "1")
    blas().limit(limits=1, user_api="blas")  # process-wide from here on (the controller keeps it)
    try:
        import numba  # lazy: a worker that runs a point imports it anyway

        numba.set_num_threads(1)
    except (ImportError, ValueError):
        pass


def _start(workers: int, fn: Callable, args: tuple):
    """fn(*args) on the process's pool of ``workers`` threads (2: halves of
    work; 1: the queue), or now when there is one thread; an object whose
    ``result()`` gives its value."""
    if threads() == 1:
        return Done(fn(*args))
    pools = PROCESS.executors
    if workers not in pools:
        # imported at the first pool, not with this module: concurrent.futures registers the
        # stop of its threads to run at interpreter exit, and registered after Numba's own
        # exit hooks it runs before them; registered first (this module loads before Numba),
        # a SIGTERM during start-up left a pool thread that the exit waited for, for ever
        from concurrent.futures import ThreadPoolExecutor  # lazy: the order at exit (above)

        pools[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"attnsim{workers}")
    return pools[workers].submit(fn, *args)


def submit(fn: Callable, *args) -> Future | Done:
    """Start ``fn(*args)`` on the second thread (or run it now with one thread);
    returns an object whose ``result()`` gives its value."""
    return _start(2, fn, args)


def in_background(fn: Callable, *args) -> Future | Done:
    """Queue ``fn(*args)`` on one background thread that runs its jobs in the
    order given, one at a time (or run it now with one thread); returns an
    object whose ``result()`` gives its value. For work that overlaps the
    caller's own (population metrics while the steps go on): the jobs may
    share buffers, since they never run at the same time. A job waits while a
    twin steps beside its run (:class:`attnsim.runtime.workspace.SteppingBeside`)."""
    return _start(1, _when_cores_free, (fn, args))


def _when_cores_free(fn: Callable, args: tuple):
    PROCESS.beside.wait()
    return fn(*args)


def stepping_done() -> None:
    """The calling thread steps no more (it collects its evaluations): if it is a twin
    beside its run, the background jobs may go on."""
    PROCESS.beside.done()


class Done:
    """A job that is already done (:class:`attnsim.models.base.Job`): an evaluation computed at
    once, or work run on the calling thread when there is one thread."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value

    def cancel(self) -> bool:
        return False  # already done, as a Future would answer


class Beside:
    """``fn()`` on a thread of its own, beside the caller's work (a run's twins, whose kernels
    release the GIL: the machine's second core takes them); with one thread (a sweep worker,
    one process per core) it runs in :meth:`result` instead, after the caller's work: the two
    would only take turns on that core. ``result()`` gives its value or raises its error."""

    def __init__(self, fn: Callable[[], object]):
        import threading  # lazy: only a run with a twin gets here

        self._fn, self._out = fn, {}
        self._thread = None
        if threads() > 1:
            self._thread = threading.Thread(target=self._stepping, daemon=True)
            PROCESS.beside.hold()  # the background jobs wait while it steps (SteppingBeside)
            try:
                self._thread.start()
            except BaseException:
                PROCESS.beside.release()
                raise

    def _stepping(self) -> None:
        PROCESS.beside.own()
        try:
            self._go()
        finally:
            PROCESS.beside.done()  # if it never collected (it failed first)

    def _go(self) -> None:
        try:
            self._out["value"] = self._fn()
        except BaseException as exc:  # handed to the caller's thread by result()
            self._out["error"] = exc

    def result(self):
        if self._thread is not None:
            self._thread.join()
        elif not self._out:
            self._go()
        if "error" in self._out:
            raise self._out["error"]
        return self._out["value"]

    def abandon(self) -> None:
        """The caller's work failed: wait for a running ``fn``, never start a deferred one,
        and drop its value or error (the caller's error is the one to report)."""
        if self._thread is not None:
            self._thread.join()
        self._out.setdefault("value", None)


def halves(fn: Callable, n: int) -> tuple:
    """(fn(0, h), fn(h, n)) with h = n // 2, the two calls on two threads."""
    h = n // 2
    second = submit(fn, h, n)
    return fn(0, h), second.result()


@functools.lru_cache(maxsize=1)
def blas() -> ThreadpoolController:
    """One threadpoolctl controller per process (finding the BLAS libraries scans /proc: ms)."""
    from threadpoolctl import ThreadpoolController  # lazy: ~20 ms, needed only by a run, not the CLI

    return ThreadpoolController()
