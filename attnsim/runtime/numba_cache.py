"""How attnsim's kernels use Numba: the options every kernel is compiled with, the first
compilation announced, and Numba's threading layer started before a kernel loads.

Every kernels module imports this module first. It uses Numba's public interface only:

- **Compilation announced.** A kernel missing from Numba's on-disk cache is compiled
  (4-15 s each here, 10-60 s for a run's first time on a machine). Numba broadcasts a
  ``"numba:compile"`` event (its documented event API, :mod:`numba.core.event`) when it
  compiles, and never when it loads from the cache; :data:`ON_MISS` hooks are called
  once at the first such event of one of attnsim's kernels, so the command line says
  "compiling" when it compiles, not when a busy machine loads slowly.
- **The threading layer started first.** A cached kernel that calls a ``parallel=True``
  one (the attention model's GD kernels call its parallel W pass) links the layer's
  scheduling symbols, but Numba starts the layer only with the parallel function's own
  compilation: a process that loads such a caller from the cache without having
  compiled or called a parallel function crashes with a segmentation fault (Numba
  issues 8578 and 9938). ``numba.get_num_threads()`` starts the layer (it is idempotent,
  about 20 ms once per process); the kernels modules that call a parallel kernel call
  :func:`start_threading_layer` at import.
- **A Numba too old** for the kernels is refused by name: 0.59.1, 0.60.0 and 0.62.1 were
  measured to crash in attnsim's GD kernel (a segmentation fault); 0.63.0 and later pass.

Loading a cached kernel goes through Numba's own path (the compiler's context is refreshed
before the first load of a process: 0.1-0.3 s of start-up, docs/performance.md).
"""

from __future__ import annotations

import threading

import numba
from numba.core import event

from .._meta import MIN_NUMBA, check_numba_version

__all__ = [
    "CACHE",
    "ERROR_MODEL",
    "FASTMATH",
    "MIN_NUMBA",
    "ON_MISS",
    "check_numba_version",
    "start_threading_layer",
]
PACKAGE = __name__.split(".")[0] + "."  # "attnsim."
CACHE = True  # every kernel: cold compilation takes 4-15 s here, a cached load well under 0.5 s
FASTMATH = False  # every kernel: kept off, results must not depend on reassociation
# every kernel: a float division by zero gives inf or NaN as in NumPy (and torch), not Python's
# ZeroDivisionError; without that check on every division the element loops vectorize (the same bits)
ERROR_MODEL = "numpy"


ON_MISS: list = []  # called once each when one of attnsim's kernels is compiled (not in the cache)
_LOCK = threading.Lock()


class _CompileWatch(event.Listener):
    """Calls the :data:`ON_MISS` hooks at the first compilation of one of attnsim's kernels."""

    def on_start(self, ev: event.Event) -> None:
        dispatcher = (ev.data or {}).get("dispatcher")
        module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
        if not module.startswith(PACKAGE) or not ON_MISS:
            return
        with _LOCK:
            hooks = list(ON_MISS)
            ON_MISS.clear()
        for hook in hooks:
            hook()

    def on_end(self, ev: event.Event) -> None:
        return None


event.register("numba:compile", _CompileWatch())


def start_threading_layer() -> int:
    """Start Numba's threading layer now (the public ``numba.get_num_threads()`` starts it:
    the module docstring says why a kernels module that calls a parallel kernel needs it)."""
    return numba.get_num_threads()


check_numba_version(numba.__version__)
