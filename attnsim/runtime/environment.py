"""Environment variables checked before any work (exit 2 in one line)."""

from __future__ import annotations

import os
import sys


class EnvironmentProblem(ValueError):
    """An environment variable attnsim (or Numba, or matplotlib) cannot run with: exit 2."""


THREADING_LAYERS = ("default", "safe", "forksafe", "threadsafe", "tbb", "omp", "workqueue")


def check_environment(plotting: bool = False) -> None:
    """Refuse, before any work and in one line, the environment variables that
    would otherwise fail deep inside Numba or matplotlib: NUMBA_NUM_THREADS (or
    OMP_NUM_THREADS, which libgomp reads) not a positive integer, NUMBA_THREADING_LAYER
    unknown or needing TBB that is not installed, and (``plotting``) an MPLBACKEND
    matplotlib does not know or an MPLCONFIGDIR it cannot write into."""
    env = os.environ
    for var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS"):  # OpenBLAS reads any value (same bits)
        value = env.get(var)
        if value is not None and value.strip() and not _whole(value):
            raise EnvironmentProblem(f"{var}: {value!r}; must be a whole number >= 1 (or unset)")
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
    # before the backend check imports matplotlib, which replaces an unusable MPLCONFIGDIR
    # in os.environ with the temporary folder it makes
    config_dir = env.get("MPLCONFIGDIR")
    if (
        plotting
        and config_dir is not None
        and not (os.path.isdir(config_dir) and os.access(config_dir, os.W_OK))
    ):
        raise EnvironmentProblem(
            f"MPLCONFIGDIR: {config_dir!r} is not a folder matplotlib can write its cache into; "
            "make it one or unset it"
        )
    backend = env.get("MPLBACKEND")
    if plotting and backend is not None:
        _check_backend(backend)


def _whole(value: str) -> bool:
    v = value.strip()
    return v.isascii() and v.isdigit() and int(v) > 0


def _have_tbb() -> bool:
    import ctypes.util  # lazy: only a NUMBA_THREADING_LAYER naming TBB needs them (3 ms of start-up)
    import glob  # lazy: as ctypes.util

    lib = os.path.join(sys.prefix, "lib")
    return bool(glob.glob(os.path.join(lib, "libtbb.so*"))) or ctypes.util.find_library("tbb") is not None


def _check_backend(backend: str) -> None:
    """matplotlib refuses an unknown MPLBACKEND when it is imported: check it first."""
    saved = os.environ.pop("MPLBACKEND")
    try:
        from matplotlib import rcsetup  # lazy: only a plotting command pays for matplotlib

        rcsetup.validate_backend(backend)
    except ValueError:
        raise EnvironmentProblem(
            f"MPLBACKEND: {backend!r} is not a matplotlib backend (attnsim writes PNGs with Agg; unset it)"
        ) from None
    finally:
        os.environ["MPLBACKEND"] = saved
