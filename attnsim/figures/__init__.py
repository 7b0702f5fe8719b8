"""The paper's figures, one module per figure (SPEC §7).

Each module has ``make(outdir, quick=False, cache="sweeps/figures") -> list[Path]``:
compute (or load cached sweep records), plot with :mod:`attnsim.plotting`
helpers, save PNGs and return their paths. ``--quick`` uses small grids.
Figures in ``SWEEPS`` run sweeps: while any of them is to be made, the local
worker processes the first sweep starts serve every later one (:func:`attnsim.sweep.worker_pool`);
with an empty cache they start first, while the figure modules load.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections.abc import Callable
from pathlib import Path

NAMES = {
    "selection": "fig1_selection",
    "dynamics": "fig2_dynamics",
    "heatmaps": "fig3_heatmaps",
    "frak_s": "fig4_frak_s",
    "delayed": "fig5_delayed",
    "phase": "fig6_phase",
    "noise": "fig7_noise",
    "generalization_time": "fig8_generalization_time",
    "limit": "fig9_limit",
    "encoder_dynamics": "fig10_encoder_dynamics",
    "encoder_heatmaps": "fig11_encoder_heatmaps",
    "real": "fig12_real",
    "collapse": "fig14_collapse",
    "normalized": "fig15_normalized",
    "magen": "fig16_magen",
    "precision": "fig17_precision",
    "many_samples": "fig18_many_samples",
    "neighbours": "fig13_neighbours",  # last: it reads figures 6 and 16's sweeps and reruns 15's runs
}
SWEEPS = {
    "heatmaps",
    "frak_s",
    "delayed",
    "phase",
    "noise",
    "generalization_time",
    "encoder_dynamics",
    "encoder_heatmaps",
    "real",
    "magen",
    "collapse",
}


def make(
    names: list[str] | None = None,
    outdir: str | Path = "figures",
    quick: bool = False,
    cache: str | Path = "sweeps/figures",
    log: Callable[[str], object] = print,
) -> list[Path]:
    """Make the named figures (all by default); returns the written files."""
    import matplotlib  # lazy: the command line imports this package for NAMES alone

    matplotlib.use("Agg")
    unknown = [n for n in names or [] if n not in NAMES]
    if unknown:
        raise ValueError(f"unknown figure(s) {unknown}; choose from {', '.join(NAMES)}")
    names = names or list(NAMES)
    out = []
    fresh = not (Path(cache) / ("quick" if quick else "full")).exists()  # nothing cached: work for sure
    with _workers(SWEEPS.intersection(names), fresh):
        for name in names:
            t = time.perf_counter()
            mod = importlib.import_module(f".{NAMES[name]}", __name__)
            paths = mod.make(Path(outdir), quick=quick, cache=Path(cache) / ("quick" if quick else "full"))
            log(f"{name}: {', '.join(str(p) for p in paths)} ({time.perf_counter() - t:.1f} s)")
            out += paths
    return out


def _workers(sweeping, fresh: bool):
    if not sweeping:
        return contextlib.nullcontext()
    from ..sweep.executors import worker_pool  # lazy: as matplotlib above

    return worker_pool(start=(os.cpu_count() or 1) if fresh else 0)
