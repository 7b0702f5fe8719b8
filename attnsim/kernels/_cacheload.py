"""Load cached kernels without first setting up Numba's compiler.

Before Numba reads a function from its on-disk cache it refreshes the whole
compiler context: it imports and installs every lowering and typing registry
(0.15-0.4 s on the first load of a process, most of the start-up above the
bare imports). A cached function needs none of that; it needs Numba's runtime
(NRT, which that refresh would initialize) and the codegen that links its
object code. :func:`install` makes cache loads do just that. A cache miss
compiles as usual: the compiler refreshes the context itself before it types
anything (``CompilerBase.__init__``), and later loads are unaffected by it.

The patch replaces one method of ``numba.core.caching.Cache``, whose body is
``refresh(); with guard: return _load_overload(...)``; it is applied only if
the pieces it calls exist (checked below), otherwise Numba is left as it is.

Importing this module (the kernels package does, first) also refuses a Numba
older than ``MIN_NUMBA`` with a clear error: 0.59.1, 0.60.0 and 0.62.1 were
measured to crash in attnsim's GD kernel (a segmentation fault, with or
without this loader); 0.63.0 and later pass the test suite.
"""

from __future__ import annotations

import numba

from .. import MIN_NUMBA, check_numba_version

__all__ = ["MIN_NUMBA", "INSTALLED", "check_numba_version", "install"]


def install() -> bool:
    """Make cache loads skip the compiler refresh; whether it was applied."""
    try:
        from numba.core import caching
        from numba.core.runtime import rtsys
    except ImportError:  # pragma: no cover - a Numba without these modules
        return False
    cache = caching.Cache
    needed = ("_load_overload", "_guard_against_spurious_io_errors")
    if not all(hasattr(cache, name) for name in needed) or not hasattr(rtsys, "initialize"):
        return False

    def load_overload(self, sig, target_context):
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)
        return None  # the guard swallowed an I/O error: a cache miss

    cache.load_overload = load_overload
    return True


check_numba_version(numba.__version__)
INSTALLED = install()
