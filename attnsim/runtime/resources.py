"""The machine's resources as attnsim plans with them."""

from __future__ import annotations

import math
import os
from typing import Any


def physical_memory() -> float:
    """Bytes of RAM of this machine (inf when the OS does not say)."""
    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return math.inf


def format_bytes(b: float) -> str:
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.3g} bytes"


GD_FLOPS_PER_S = 1e10  # optimistic, so only hopeless runs are refused
MAX_GD_SECONDS = 30 * 86400


def check_fits(
    items: list[tuple[str, str, float]],
    steps: int,
    step_flops: float,
    error: type[Exception],
    step_keys: str = "steps",
) -> None:
    """Refuse, before anything is allocated, a run whose large arrays ``items``
    ((keys, what, bytes) each) need more than 80 % of this machine's memory, or
    whose ``steps`` GD steps of ``step_flops`` each (0: not GD) would take longer
    than ``MAX_GD_SECONDS``: one line naming the keys and the estimate (``error``,
    the caller's ConfigError: exit 2; ``step_keys``: the keys that set a step's cost)."""
    total = sum(b for _, _, b in items)
    have = physical_memory()
    if total > 0.8 * have:
        keys, what, b = max(items, key=lambda it: it[2])
        raise error(
            f"{keys}: the run needs about {format_bytes(total)} of memory, mostly {what}: {format_bytes(b)}; "
            f"this machine has {format_bytes(have)}"
        )
    seconds = steps * step_flops / GD_FLOPS_PER_S
    if seconds > MAX_GD_SECONDS:
        raise error(
            f"{step_keys}: {steps:.3g} GD steps would take about {seconds / 3.15e7:.3g} years here; "
            + (
                "integrator=flow follows the same dynamics to 1e14 steps in seconds"
                if step_keys == "steps"
                else "use a smaller batch or fewer steps"
            )
        )


# NumPy asks the kernel for transparent huge pages for every array of 4 MB or more (madvise).
# Where the kernel then compacts memory to find them (THP defrag = madvise, a common default),
# every fresh large array pays for the compaction: measured on this project's 2-core machine,
# the encoder's 160 MB of parameters took 0.49 s to draw and 0.49 s to copy with the advice,
# 0.12 s and 0.07 s without it; steps run at the same speed either way. NumPy's documented
# environment variable NUMPY_MADVISE_HUGEPAGE (read when NumPy is imported) turns the advice
# off: the command line and the local sweep workers set it to this unless the user did;
# docs/usage.md says how to set it for the Python API and Dask workers.
HUGEPAGE_ENV = ("NUMPY_MADVISE_HUGEPAGE", "0")


def no_huge_pages_unless_asked() -> None:
    """Set NUMPY_MADVISE_HUGEPAGE=0 in this process's environment unless the user set it (call
    before NumPy is imported: the command line's start)."""
    os.environ.setdefault(*HUGEPAGE_ENV)


def tqdm_class(progress: bool | None) -> Any:
    """tqdm's bar class: the notebook's (tqdm.auto) only when a bar may show; without a bar
    the plain one (importing tqdm.auto in a notebook without ipywidgets warns, bar or not)."""
    if progress is False:
        from tqdm import tqdm  # lazy: 0.1 s of start-up, paid only by work long enough for a bar
    else:
        from tqdm.auto import tqdm  # lazy: as above
    return tqdm
