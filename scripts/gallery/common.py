"""Shared helpers of the figure modules: cached sweeps and saving."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attnsim.results import atomic_write, save_png
from attnsim.sweep import Store, parse_sweep, record_key, run_sweep

if TYPE_CHECKING:  # names in annotations only
    from matplotlib.figure import Figure

# The symbols of figure labels, titles and legends in mathtext (the numbers files stay ASCII).
MU = r"$\|\mu\|$"
ETA = r"$\eta$"
SNR = r"SNR $= \|\mu\|/\sqrt{d}$"
FRAK_S = r"$\mathfrak{S}$"

# one colour per regime (attnsim.metrics.REGIMES), in every figure that maps regimes
REGIME_COLORS = {
    "not_overfitting": "tab:blue",
    "partial": "tab:cyan",
    "benign": "tab:green",
    "harmful": "tab:red",
    "underfit": "0.5",
    "fitted": "0.8",
    "clean_labels": "tab:olive",
    "fresh_samples": "tab:purple",
}


def sweep_mapping(
    name: str,
    base: dict,
    grid: dict,
    seeds: Sequence[int],
    save: Sequence[str] = (),
    points: Sequence[dict] = (),
) -> dict:
    """A figure's sweep as a sweep file's mapping (a grid, or explicit ``points``): what the
    module's ``sweeps(quick)`` lists, so that :func:`gallery.make` can run the sweeps of
    every figure together before any is drawn."""
    data = {"sweep": {"name": name, "seeds": list(seeds), "save": list(save)}, "base": base, "grid": grid}
    if points:
        data["point"] = list(points)
    return data


READ_ONLY = threading.local()  # .on: records are read, never computed (gallery.make ran the sweeps)


def records_of(cache: Path, *mappings: dict) -> list[dict]:
    """The successful records of the sweeps ``mappings`` (run, or reused from ``cache``),
    one sweep after the other."""
    out = []
    for mapping in mappings:
        spec = parse_sweep(mapping)
        if getattr(READ_ONLY, "on", False):
            recs = Store(cache / spec.name, spec.data_id).records(
                [record_key(c, spec.data_id) for c in spec.points()]
            )
        else:
            recs = run_sweep(spec, cache, progress=None).records()
        out += [r for r in recs if r.get("status") == "ok"]
    return out


def arrays(trajectory: dict) -> dict[str, np.ndarray]:
    """A record's saved trajectory as float arrays (JSON's null, a NaN the record could not
    hold, back to NaN)."""
    return {k: np.asarray(v, dtype=float) for k, v in trajectory.items()}


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
