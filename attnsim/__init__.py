"""attnsim: fast, exact simulation of token selection by a softmax attention
classifier trained on noisy labels (Sakamoto & Sato, ICML 2025).

>>> import attnsim
>>> res = attnsim.simulate({"d": 2000, "signal_norm": 20})
>>> res.final["regime"]
'benign'

The numerical stack (NumPy, SciPy, Numba) is imported on first use of a name
below, so ``attnsim --version`` and ``--help`` start instantly.
"""

import time as _time

_t0 = _time.perf_counter()

__version__ = "0.1.0"

_LAZY = {
    "Config": "config",
    "ConfigError": "config",
    "make_config": "config",
    "Result": "results",
    "load": "results",
    "simulate": "run",
}
__all__ = [*_LAZY, "DependencyError", "__version__"]


class DependencyError(ImportError):
    """An installed dependency attnsim cannot run with (the message says which and what to do)."""


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    if name == "IMPORT_S":  # interpreter-side import time of the package, for startup_s
        from . import run  # noqa: F401

        globals()["IMPORT_S"] = _time.perf_counter() - _t0
        return globals()["IMPORT_S"]
    raise AttributeError(f"module 'attnsim' has no attribute {name!r}")
