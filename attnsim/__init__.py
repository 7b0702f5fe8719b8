"""attnsim: fast, exact simulation of token selection by a softmax attention
classifier trained on noisy labels (Sakamoto & Sato, ICML 2025).

>>> import attnsim
>>> res = attnsim.simulate({"d": 2000, "signal_norm": 20})
>>> res.final["regime"]
'benign'

The numerical stack (NumPy, SciPy, Numba) is imported on first use of a name
below, so ``attnsim --version`` and ``--help`` start instantly.
"""

import importlib

from ._meta import MIN_NUMBA, DependencyError, SimulationError, __version__, check_numba_version

_LAZY = {
    "Config": "config",
    "ConfigError": "config",
    "make_config": "config",
    "Result": "results",
    "load": "results",
    "load_sweep": "sweep",
    "load_trajectories": "sweep",
    "simulate": "run",
    "Workspace": "runtime.workspace",
}
__all__ = [*_LAZY, "DependencyError", "SimulationError", "__version__"]
_EAGER = (MIN_NUMBA, check_numba_version)  # re-exported


def __getattr__(name: str):
    if name in _LAZY:  # the lazy start-up: the module is imported on first use of the name
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attnsim' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The API's names before first use too (tab completion lists the lazy ones)."""
    return sorted(set(globals()) | set(__all__))
