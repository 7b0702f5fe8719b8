"""Shared helpers of the figure modules: cached sweeps and saving."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..results import atomic_write, save_png
from ..sweep import parse_sweep, run_sweep

if TYPE_CHECKING:  # names in annotations only
    from matplotlib.figure import Figure


def sweep_records(
    cache: Path,
    name: str,
    base: dict,
    grid: dict,
    seeds: list[int],
    save: Sequence[str] = (),
    points: Sequence[dict] = (),
) -> list[dict]:
    """Run (or reuse) a sweep under ``cache`` (a grid, or explicit ``points``)
    and return its successful records."""
    data = {"sweep": {"name": name, "seeds": list(seeds), "save": list(save)}, "base": base, "grid": grid}
    if points:
        data["point"] = list(points)
    spec = parse_sweep(data)
    return [r for r in run_sweep(spec, cache, progress=None).records() if r.get("status") == "ok"]


def save(fig: Figure, path: Path, dpi: int = 110) -> Path:
    return save_png(fig, path, dpi)


def grid_of(
    records: list[dict], xkey: str, ykey: str, value: Callable[[dict], float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xs, ys, Z) with Z[iy, ix] = value(record), NaN where missing."""
    xs = sorted({r["config"][xkey] for r in records})
    ys = sorted({r["config"][ykey] for r in records})
    Z = np.full((len(ys), len(xs)), np.nan)
    for r in records:
        Z[ys.index(r["config"][ykey]), xs.index(r["config"][xkey])] = value(r)
    return np.array(xs), np.array(ys), Z


def write_numbers(outdir: Path, stem: str, lines: list[str]) -> Path:
    """The numbers a figure shows, as text beside its PNG (``<stem>.txt``): what
    docs/figures.md quotes comes from these files."""
    path = outdir / f"{stem}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + "\n"
    atomic_write(path, lambda fh: fh.write(text.encode()))
    return path
