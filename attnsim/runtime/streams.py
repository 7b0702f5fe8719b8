"""The process's standard streams as the command line writes them: a write that fails
(a full device, a closed pipe) is a :class:`StreamError`, told from the other OSErrors
of a command (which name their file), and a stream the caller closed writes nowhere."""

from __future__ import annotations

import contextlib
import errno
import os
import sys


class StreamError(OSError):
    """Standard output or error cannot be written (a full device, a closed pipe)."""


class Guarded:
    """A text stream whose write errors are :class:`StreamError` (so they are told
    from the other OSErrors of a command, which name their file)."""

    def __init__(self, stream, name: str):
        self._stream, self.name = stream, name

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise StreamError(exc.errno, f"standard {self.name}: {exc.strerror}") from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise StreamError(exc.errno, f"standard {self.name}: {exc.strerror}") from None

    def __getattr__(self, attr):
        return getattr(self._stream, attr)


def guard_streams() -> tuple:
    """Standard output and error guarded; a closed one (None) writes nowhere."""
    saved = sys.stdout, sys.stderr
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:  # closed by the caller (>&-): the command's output is discarded
            stream = open(os.devnull, "w")  # noqa: SIM115  (the process's own stream)
        if not isinstance(stream, Guarded):
            setattr(sys, name, Guarded(stream, {"stdout": "output", "stderr": "error"}[name]))
    return saved


def stream_failed(exc: StreamError, saved: tuple) -> int:
    """The exit code of a command whose output could not be written, said in one line
    on the caller's standard error when it can be (nothing after a closed pipe: the
    reader left, as ``attnsim keys | head`` does, and SIGPIPE would end a tool silently)."""
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115  (nothing more can be said there)
    if exc.errno == errno.EPIPE:
        return 141
    with contextlib.suppress(OSError):
        print(f"attnsim: error: cannot write {exc.strerror}", file=saved[1] or sys.__stderr__)
    return 1
