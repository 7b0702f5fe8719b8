"""Signal handlers that are safe while Numba compiles or loads kernels, and the fast exit."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

_DEFER_IN = (
    (f"{os.sep}llvmlite{os.sep}", None),
    (f"{os.sep}numba{os.sep}", None),
    # starting a pool thread: raised between its start and its registration, the thread is
    # never told to stop and the interpreter waits for it at exit for ever. Only the start:
    # a thread that waits (a future's result, a join, an event) takes the signal at once
    (f"{os.sep}concurrent{os.sep}futures{os.sep}", ("_adjust_thread_count",)),
    (f"{os.sep}threading.py", ("start",)),
)  # (file, functions or None for all) where a raise can abort or hang the process


def _deferred(frame: Any) -> bool:
    """Whether a signal that finds the main thread at ``frame`` must wait (:data:`_DEFER_IN`,
    anywhere on the stack), or the main thread is in the import machinery's own code (only
    the innermost frame: a module's body runs under the import machinery's frames and takes
    signals as any code does). There a raise can leave the global import lock held: a
    module lock's weakref callback (``_get_module_lock.<locals>.cb``) takes the lock before
    its ``try``; a raise there is printed and dropped, the lock stays held, and the next
    thread that imports anything waits for ever while this one waits for that thread."""
    if frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        return True
    f = frame
    while f is not None:
        code = f.f_code
        for part, names in _DEFER_IN:
            if part in code.co_filename and (names is None or code.co_name in names):
                return True
        f = f.f_back
    return False


def on_signal(signum: int, action: Callable[[], None]) -> Any:
    """Make ``action()`` (which raises, to unwind) the handler of ``signum``;
    returns the handler it replaces.

    Python runs a handler wherever the main thread is. While Numba compiles
    a kernel that can be inside a callback from LLVM, where an exception is
    printed and dropped and the process carries on as if never signalled; while
    Numba loads a kernel it can be inside its BLAS lookup, where an exception
    aborts the process ("Fatal Python error: BLAS wrapper returned with an
    error"). Inside Numba's or llvmlite's Python code, or while a thread starts,
    the signal is instead sent again 50 ms later, once that code has returned
    (compiled kernels have no Python frames: a long kernel delays any handler
    until it returns anyway, which is why steps go in chunks of at most about a
    tenth of a second). A thread that waits for another (a twin, an evaluation)
    takes the signal at once. Anywhere else an exception is dropped (a ``__del__``,
    a weakref callback) the handler's exception reaches :data:`sys.unraisablehook`,
    which sends the signal again instead of printing it."""
    _catch_dropped()

    def handler(sig, frame):
        if _deferred(frame):
            _send_again(sig)
            return
        try:
            action()
        except BaseException as exc:
            _raised[:] = [exc, sig]
            raise

    return signal.signal(signum, handler)


_raised: list = []  # [the exception a handler last raised, its signal]


def _send_again(sig: int) -> None:
    retry = threading.Timer(0.05, os.kill, (os.getpid(), sig))
    retry.daemon = True
    retry.start()


def _catch_dropped() -> None:
    """Install (once) the hook that re-sends a signal whose handler's exception was dropped."""
    previous = sys.unraisablehook
    if getattr(previous, "attnsim_signals", False):
        return

    def hook(unraisable: Any) -> None:
        if _raised and unraisable.exc_value is _raised[0]:
            sig = _raised[1]
            _raised.clear()
            _send_again(sig)
            return
        previous(unraisable)

    hook.attnsim_signals = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def end_process(code: int) -> None:
    """End this process with exit code ``code`` without Python's teardown of
    what it loaded (0.1-0.2 s, mostly Numba's and LLVM's objects, for nothing:
    callers have written and closed every file and stopped their workers).
    stdout and stderr are flushed first; if that fails (a closed pipe, a full
    device), the exit code says so (1 unless it already says failure)."""
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # None: closed by the caller (>&-)
                stream.flush()
    except (OSError, ValueError):  # ValueError: a stream closed under us
        code = code or 1
    os._exit(code)
