"""Two-way splits of NumPy and BLAS work that releases the GIL (the reduced
engine's setup products, the population metrics), and the signal handlers and
the fast exit of attnsim's processes.

The work is always cut into the same fixed pieces and the pieces are combined
in a fixed order, so results do not depend on how many cores run them; the
pieces run on two threads unless ``NUMBA_NUM_THREADS`` is 1 (sweep workers set
that, one process per core).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

# by thread count; made on first use (the CLI imports this module)
_EXECUTORS: dict[int, ThreadPoolExecutor] = {}
_DEFER_IN = (
    f"{os.sep}llvmlite{os.sep}",
    f"{os.sep}numba{os.sep}",
)  # frames where a raise can abort the process


def threads() -> int:
    return 1 if os.environ.get("NUMBA_NUM_THREADS") == "1" or (os.cpu_count() or 1) == 1 else 2


def _start(workers: int, fn: Callable, args: tuple):
    """fn(*args) on the process's pool of ``workers`` threads (2: halves of
    work; 1: the queue), or now when there is one thread; an object whose
    ``result()`` gives its value."""
    if threads() == 1:
        return _Done(fn(*args))
    if workers not in _EXECUTORS:
        from concurrent.futures import ThreadPoolExecutor

        _EXECUTORS[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"attnsim{workers}")
    return _EXECUTORS[workers].submit(fn, *args)


def submit(fn: Callable, *args):
    """Start ``fn(*args)`` on the second thread (or run it now with one thread);
    returns an object whose ``result()`` gives its value."""
    return _start(2, fn, args)


def in_background(fn: Callable, *args):
    """Queue ``fn(*args)`` on one background thread that runs its jobs in the
    order given, one at a time (or run it now with one thread); returns an
    object whose ``result()`` gives its value. For work that overlaps the
    caller's own (population metrics while the steps go on): the jobs may
    share buffers, since they never run at the same time."""
    return _start(1, fn, args)


class _Done:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value

    def cancel(self) -> bool:
        return False  # already done, as a Future would answer


def halves(fn: Callable, n: int):
    """(fn(0, h), fn(h, n)) with h = n // 2, the two calls on two threads."""
    h = n // 2
    second = submit(fn, h, n)
    return fn(0, h), second.result()


def on_signal(signum: int, action: Callable[[], None]):
    """Make ``action()`` (which raises, to unwind) the handler of ``signum``;
    returns the handler it replaces.

    Python runs a handler wherever the main thread is. While Numba compiles
    a kernel that can be inside a callback from LLVM, where an exception is
    printed and dropped and the process carries on as if never signalled; while
    Numba loads a kernel it can be inside its BLAS lookup, where an exception
    aborts the process ("Fatal Python error: BLAS wrapper returned with an
    error"). Inside Numba's or llvmlite's Python code the signal is instead sent
    again 50 ms later, once that code has returned (compiled kernels have no
    Python frames: a long kernel delays any handler until it returns anyway)."""

    def handler(sig, frame):
        f = frame
        while f is not None:
            if any(part in f.f_code.co_filename for part in _DEFER_IN):
                retry = threading.Timer(0.05, os.kill, (os.getpid(), sig))
                retry.daemon = True
                retry.start()
                return
            f = f.f_back
        action()

    return signal.signal(signum, handler)


class EnvironmentProblem(ValueError):
    """An environment variable attnsim (or Numba, or matplotlib) cannot run with: exit 2."""


THREADING_LAYERS = ("default", "safe", "forksafe", "threadsafe", "tbb", "omp", "workqueue")


def check_environment(plotting: bool = False) -> None:
    """Refuse, before any work and in one line, the environment variables that
    would otherwise fail deep inside Numba or matplotlib: NUMBA_NUM_THREADS not
    a positive integer, NUMBA_THREADING_LAYER unknown or needing TBB that is
    not installed, and (``plotting``) an MPLBACKEND matplotlib does not know."""
    env = os.environ
    threads_ = env.get("NUMBA_NUM_THREADS")
    if threads_ is not None and not (threads_.strip().isdigit() and threads_.isascii() and int(threads_) > 0):
        raise EnvironmentProblem(f"NUMBA_NUM_THREADS: {threads_!r}; must be a whole number >= 1 (or unset)")
    layer = env.get("NUMBA_THREADING_LAYER")
    if layer is not None:
        if layer.lower() not in THREADING_LAYERS:
            raise EnvironmentProblem(
                f"NUMBA_THREADING_LAYER: {layer!r} is not one of {', '.join(THREADING_LAYERS)} (or unset)"
            )
        if layer.lower() in ("tbb", "safe") and not _have_tbb():
            raise EnvironmentProblem(
                f"NUMBA_THREADING_LAYER: {layer!r} needs Intel TBB, which is not installed "
                "(pip install tbb); or unset it"
            )
    backend = env.get("MPLBACKEND")
    if plotting and backend is not None:
        _check_backend(backend)


def _have_tbb() -> bool:
    import ctypes.util
    import glob

    lib = os.path.join(sys.prefix, "lib")
    return bool(glob.glob(os.path.join(lib, "libtbb.so*"))) or ctypes.util.find_library("tbb") is not None


def _check_backend(backend: str) -> None:
    """matplotlib refuses an unknown MPLBACKEND when it is imported: check it first."""
    saved = os.environ.pop("MPLBACKEND")
    try:
        from matplotlib import rcsetup

        rcsetup.validate_backend(backend)
    except ValueError:
        raise EnvironmentProblem(
            f"MPLBACKEND: {backend!r} is not a matplotlib backend (attnsim writes PNGs with Agg; unset it)"
        ) from None
    finally:
        os.environ["MPLBACKEND"] = saved


def end_process(code: int) -> None:
    """End this process with exit code ``code`` without Python's teardown of
    what it loaded (0.1-0.2 s, mostly Numba's and LLVM's objects, for nothing:
    callers have written and closed every file and stopped their workers).
    stdout and stderr are flushed first; if that fails (a closed pipe), Python
    exits the usual way and reports it."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        sys.exit(code)
    os._exit(code)
