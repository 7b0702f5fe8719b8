"""What every layer of attnsim may need and that needs nothing: the version,
the package's own error types and the Numba versions it runs with."""

import time as _time

__version__ = "0.1.0"
GRAD_TOL = 1e-5  # check-grad: central differences at h = 1e-6 give about 1e-9; a wrong gradient gives O(1)
PACKAGE_T0 = _time.perf_counter()  # when the package's import began (run.py measures its import time from it)


# the integrators without a training set (SPEC §17): GD and gradient flow on the population
# risk, and online SGD (a fresh batch every step)
POPULATION_INTEGRATORS = ("population", "population_flow")
FRESH_INTEGRATORS = (*POPULATION_INTEGRATORS, "online")


class DependencyError(ImportError):
    """An installed dependency attnsim cannot run with (the message says which and what to do)."""


class ConfigError(ValueError):
    """A bad configuration value, key, file or ``--set`` argument (exit 2, one line)."""


class SimulationError(RuntimeError):
    """A run that failed (diverged); the command line exits with code 1."""


class PlotError(ValueError):
    """A plot that cannot be drawn as asked (an unknown metric or key): exit 2."""


# numba 0.59.1, 0.60.0 and 0.62.1 were measured to crash in attnsim's GD kernel (a
# segmentation fault); 0.63.0 and later pass the test suite (no upper bound: attnsim uses
# Numba's public interface only).
MIN_NUMBA = (0, 63)


def check_numba_version(version: str) -> None:
    """DependencyError (an ImportError) if ``version`` (numba's) is older than ``MIN_NUMBA``."""
    if tuple(int(part) for part in version.split(".")[:2]) < MIN_NUMBA:
        need = ".".join(map(str, MIN_NUMBA))
        raise DependencyError(
            f"attnsim needs numba >= {need} (found {version}): older versions crash running its "
            "kernels; pip install -U numba"
        )
