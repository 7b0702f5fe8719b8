"""The paper's figures, one module per figure (SPEC §7).

Each module has ``make(outdir, quick=False, cache="sweeps/figures") -> list[Path]``:
compute (or load cached sweep records), plot with :mod:`attnsim.plotting`
helpers, save PNGs and return their paths. ``--quick`` uses small grids.
A module whose figure reads sweep records lists those sweeps, its own and
others', as ``sweeps(quick) -> list[dict]`` (sweep mappings,
:func:`.common.sweep_mapping`). :func:`make` runs the sweeps of every figure asked for
together, on one pool of worker processes (one per core), the costliest tasks
first whichever figure they belong to, and draws each figure as soon as its
own sweeps are done (in that order, not the list's), while the workers go on
with the others'.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import time
from collections.abc import Callable, Iterator
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
    "positional_semantic": "fig19_positional_semantic",
    "phase_diagram": "fig20_phase_diagram",
    "linear_icl": "fig22_linear_icl",
    "linear_attention": "fig23_linear_attention",
    "single_location": "fig21_single_location",
    "neighbours": "fig13_neighbours",  # last: it reads figures 6, 15 and 16's sweeps
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

    from .common import READ_ONLY  # lazy: as matplotlib

    matplotlib.use("Agg")
    names, modules, sweeps = _figures(names, quick)
    root = Path(cache) / ("quick" if quick else "full")
    out: list[Path] = []
    notes: list[str] = []
    with _sweeping(sweeps, root, notes) as next_ready:
        READ_ONLY.on = True  # the figures read the records the sweeps write
        try:
            for name in next_ready(names):
                t = time.perf_counter()
                paths = modules[name].make(Path(outdir), quick=quick, cache=root)
                log(f"{name}: {', '.join(str(p) for p in paths)} ({time.perf_counter() - t:.1f} s)")
                out += paths
        finally:
            READ_ONLY.on = False
    for note in notes:
        log(note)
    return out


def sweeps_only(
    names: list[str] | None = None, quick: bool = False, cache: str | Path = "sweeps/figures"
) -> list[str]:
    """The named figures' sweeps run (or read from the cache, where done) without drawing; what
    the sweeps report of failed points."""
    names, _, sweeps = _figures(names, quick)
    notes: list[str] = []
    with _sweeping(sweeps, Path(cache) / ("quick" if quick else "full"), notes) as next_ready:
        for _ in next_ready(names):
            pass
    return notes


def _figures(names: list[str] | None, quick: bool) -> tuple[list[str], dict, dict]:
    """(names, their modules, their sweep mappings); every figure when ``names`` is None."""
    unknown = [n for n in names or [] if n not in NAMES]
    if unknown:
        raise ValueError(f"unknown figure(s) {unknown}; choose from {', '.join(NAMES)}")
    names = names or list(NAMES)
    modules = {name: importlib.import_module(f".{NAMES[name]}", __name__) for name in names}
    sweeps = {name: getattr(modules[name], "sweeps", lambda quick: [])(quick) for name in names}
    return names, modules, sweeps


@contextlib.contextmanager
def _sweeping(
    sweeps: dict[str, list[dict]], root: Path, notes: list[str]
) -> Iterator[Callable[[list[str]], Iterator[str]]]:
    """Run every figure's sweeps (each once) on a thread while the block draws; yields
    ``next_ready(names)``, which gives the names as their sweeps are done (the first ready
    in the list's order each time; raising what stopped the sweeps, if anything did).
    ``notes`` gets what the sweeps report of failed points, sweep by sweep."""
    from attnsim.sweep import parse_sweep  # lazy: as matplotlib above
    from attnsim.sweep.executors import worker_pool  # lazy: as above
    from attnsim.sweep.run import run_sweeps  # lazy: as above

    specs, index, of = [], {}, {}
    for name, mappings in sweeps.items():
        of[name] = []
        for m in mappings:
            spec = parse_sweep(m)  # every point checked before anything runs
            key = (spec.name, spec.hash())
            if key not in index:
                index[key] = len(specs)
                specs.append((spec, root))
            of[name].append(index[key])
    done = [False] * len(specs)
    changed = threading.Condition()
    stop, failed = threading.Event(), []

    def finished(i: int) -> None:
        with changed:
            done[i] = True
            changed.notify_all()

    def work() -> None:
        try:
            reports = run_sweeps(specs, progress=False, on_done=finished, stop=stop)
            notes.extend(f"{rep.root.name}: {m}" for rep in reports for m in rep.messages if "failed" in m)
        except BaseException as exc:  # handed to the drawing thread by next_ready()
            failed.append(exc)
        finally:
            for i in range(len(specs)):
                finished(i)

    def next_ready(names: list[str]) -> Iterator[str]:
        left = list(names)
        while left:
            with changed:
                ready = [n for n in left if all(done[i] for i in of[n])]
                while not ready:
                    changed.wait(0.5)  # in steps, so Ctrl-C reaches the drawing thread
                    ready = [n for n in left if all(done[i] for i in of[n])]
            if failed:
                raise failed[0]
            left.remove(ready[0])
            yield ready[0]

    missing = any(not (root / spec.name).exists() for spec, _ in specs)
    with worker_pool(start=(os.cpu_count() or 1) if missing else 0):
        thread = threading.Thread(target=work, name="attnsim-sweeps", daemon=True)
        thread.start()
        try:
            yield next_ready
        except BaseException:
            stop.set()  # the drawing stopped (an error, Ctrl-C): so does the work
            raise
        finally:
            thread.join()
