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
_LLVM = f"{os.sep}llvmlite{os.sep}"


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

    Python runs a handler wherever the main thread is, and while Numba compiles
    a kernel that can be inside a callback from LLVM, where an exception is
    printed and dropped and the process carries on as if never signalled. There
    the signal is instead sent again 50 ms later, once compilation has moved on."""

    def handler(sig, frame):
        f = frame
        while f is not None:
            if _LLVM in f.f_code.co_filename:
                retry = threading.Timer(0.05, os.kill, (os.getpid(), sig))
                retry.daemon = True
                retry.start()
                return
            f = f.f_back
        action()

    return signal.signal(signum, handler)


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
