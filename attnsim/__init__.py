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
    "load_sweep": "sweep",
    "simulate": "run",
}
__all__ = [*_LAZY, "DependencyError", "SimulationError", "__version__"]


class DependencyError(ImportError):
    """An installed dependency attnsim cannot run with (the message says which and what to do)."""


class SimulationError(RuntimeError):
    """A run that failed (diverged); the command line exits with code 1."""


# numba 0.59.1, 0.60.0 and 0.62.1 were measured to crash in attnsim's GD kernel (a
# segmentation fault); 0.63.0 and later pass the test suite. Checked where the kernels
# load (attnsim/kernels/_cacheload.py) and by the command line before it starts workers.
MIN_NUMBA = (0, 63)


def check_numba_version(version: str) -> None:
    """DependencyError (an ImportError) if ``version`` (numba's) is older than ``MIN_NUMBA``."""
    if tuple(int(part) for part in version.split(".")[:2]) < MIN_NUMBA:
        need = ".".join(map(str, MIN_NUMBA))
        raise DependencyError(
            f"attnsim needs numba >= {need} (found {version}): older versions crash running its "
            "kernels; pip install -U numba"
        )


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
