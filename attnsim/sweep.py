"""Sweeps: a declarative grid of configurations x seeds, run by long-lived
workers into a resumable store of records.

A sweep file (TOML)::

    [sweep]
    name = "heatmap"           # records go to <out>/<name>/ (default out: sweeps/)
    seeds = [0]                # a list, or an int n meaning 0..n-1
    save = ["train_loss"]      # optional trajectory arrays kept in each record

    [base]                     # config keys shared by every point
    steps = 1000

    [grid]                     # config keys to vary: lists or ranges
    signal_norm = {start = 5, stop = 100, num = 39}     # inclusive linspace
    d = {start = 250, stop = 5000, step = 125}           # inclusive arange

Each point is one JSON record named by a hash of its full resolved config and
the schema version, written atomically (temporary file + rename): kill a sweep
at any moment and nothing finished is lost, nothing half-written is read;
rerunning skips finished points. Points are grouped by what the reduced
engine's setup depends on (d, seed, ...) and each group goes to one worker, so
a group pays for its setup once. ``records.csv`` is a tidy table of all records.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .config import KEYS, Config, ConfigError, from_mapping, read_toml, unknown_key_message
from .results import SCHEMA_VERSION, _clean, atomic_write

SETUP_KEYS = ("seed", "n", "T", "d", "sigma", "init_W", "init_W_scale", "init_p", "init_p_scale")


@dataclass
class SweepSpec:
    """A parsed sweep: its name, seeds, base config, grid axes and saved arrays."""

    name: str
    seeds: list[int]
    base: dict[str, Any]
    grid: dict[str, list]
    save: list[str] = field(default_factory=list)

    def points(self) -> list[Config]:
        """Every (grid point, seed) as a validated Config, in grid order."""
        keys = list(self.grid)
        out = []
        for combo in itertools.product(*(self.grid[k] for k in keys)):
            for seed in self.seeds:
                values = {**self.base, **dict(zip(keys, combo)), "seed": seed}
                out.append(from_mapping(values))
        return out


def _axis(key: str, spec: Any) -> list:
    if isinstance(spec, list):
        if not spec:
            raise ConfigError(f"grid.{key}: empty list")
        return spec
    if isinstance(spec, dict):
        try:
            start, stop = spec["start"], spec["stop"]
            if "num" in spec:
                vals = np.linspace(start, stop, int(spec["num"]))
            else:
                step = spec["step"]
                vals = np.arange(start, stop + step / 2, step)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"grid.{key}: expected a list or {{start, stop, num|step}} ({exc})") from None
        ints = all(isinstance(spec.get(k, 0), int) for k in ("start", "stop", "step"))
        return [int(round(v)) for v in vals] if ints and "num" not in spec else [float(v) for v in vals]
    return [spec]


def parse_sweep(data: dict, name: str = "sweep") -> SweepSpec:
    """Validate a sweep mapping (as read from TOML)."""
    unknown = set(data) - {"sweep", "base", "grid"}
    if unknown:
        raise ConfigError(f"sweep file: unknown table(s) {sorted(unknown)}; use [sweep], [base], [grid]")
    meta = data.get("sweep", {})
    seeds = meta.get("seeds", [0])
    if isinstance(seeds, int):
        seeds = list(range(seeds))
    if not isinstance(seeds, list) or not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise ConfigError("sweep.seeds: a list of integers >= 0, or a count")
    base, grid = dict(data.get("base", {})), dict(data.get("grid", {}))
    for key in list(base) + list(grid):
        if key not in KEYS:
            raise ConfigError(unknown_key_message(key))
        if key == "seed":
            raise ConfigError("seed: set seeds in [sweep] seeds, not as a config key")
    spec = SweepSpec(
        name=str(meta.get("name", name)),
        seeds=seeds,
        base=base,
        grid={k: _axis(k, v) for k, v in grid.items()},
        save=list(meta.get("save", [])),
    )
    spec.points()  # validates every point now, before anything runs
    return spec


def load_sweep(path: str | Path) -> SweepSpec:
    return parse_sweep(read_toml(path, "sweep"), name=Path(path).stem)


def record_key(cfg: Config) -> str:
    """Hash of the full resolved config plus the schema version."""
    text = json.dumps({"schema": SCHEMA_VERSION, "config": cfg.to_dict()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def setup_group(cfg: Config) -> tuple:
    c = cfg.to_dict()
    return tuple(c[k] for k in SETUP_KEYS) + (c["engine"],)


def run_point(cfg_dict: dict, save: list[str]) -> dict:
    """Simulate one point and return its record (runs in a worker)."""
    from .run import simulate

    t = time.perf_counter()
    try:
        res = simulate(cfg_dict)
    except Exception as exc:  # noqa: BLE001 - a failed point is recorded, the sweep goes on
        return {"config": cfg_dict, "status": "failed", "error": f"{type(exc).__name__}: {exc}"}
    rec = {
        "schema_version": SCHEMA_VERSION,
        "status": "ok",
        "config": res.config,
        "engine": res.engine,
        "final": res.final,
        "theory": res.theory,
        "warnings": res.warnings,
        "versions": res.versions,
        "git": res.git,
        "elapsed_s": res.elapsed_s,
        "wall_s": time.perf_counter() - t,
    }
    if save:
        rec["trajectory"] = {k: res.trajectory[k] for k in ["step", *save] if k in res.trajectory}
    return _clean(rec)


def run_group(items: list[tuple[dict, list[str]]]) -> list[dict]:
    """Run the points of one setup group in order (they share the setup)."""
    return [run_point(cfg, save) for cfg, save in items]


class Store:
    """One JSON file per record under ``root/records``; writes are atomic."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.dir = self.root / "records"
        self.dir.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def done(self) -> set[str]:
        return {p.stem for p in self.dir.glob("*.json")}

    def write(self, key: str, record: dict) -> None:
        text = json.dumps(record, sort_keys=True)
        atomic_write(self.path(key), lambda fh: fh.write(text.encode()))

    def records(self) -> list[dict]:
        out = []
        for p in sorted(self.dir.glob("*.json")):
            with open(p) as fh:
                out.append(json.load(fh))
        return out


def _flat(rec: dict) -> dict:
    row = {"status": rec.get("status")}
    row.update({f"config.{k}": v for k, v in rec.get("config", {}).items()})
    row.update({k: v for k, v in rec.get("final", {}).items()})
    for k, v in rec.get("theory", {}).items():
        if not isinstance(v, dict):
            row[f"theory.{k}"] = v
    row["engine"] = rec.get("engine", {}).get("used")
    row["elapsed_s"] = rec.get("elapsed_s")
    return row


def write_csv(store: Store, path: Path | None = None) -> Path:
    """A tidy table of every record (one row per run)."""
    rows = [_flat(r) for r in store.records()]
    cols: dict[str, None] = {}
    for row in rows:
        cols.update(dict.fromkeys(row))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(cols))
    writer.writeheader()
    writer.writerows(rows)
    path = path or store.root / "records.csv"
    atomic_write(path, lambda fh: fh.write(buf.getvalue().encode()))
    return path


_WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}


def run_sweep(
    spec: SweepSpec,
    out: str | Path = "sweeps",
    workers: int | None = None,
    scheduler: str | None = None,
    client=None,
    progress: bool | None = None,
) -> Store:
    """Run every unfinished point of ``spec`` and return its store.

    workers: local processes (default: the number of cores); each runs whole
    setup groups. scheduler / client: a Dask distributed scheduler address or
    Client, used instead of local processes.
    """
    from tqdm.auto import tqdm

    store = Store(Path(out) / spec.name)
    atomic_write(
        store.root / "sweep.json",
        lambda fh: fh.write(json.dumps(_clean(spec.__dict__), indent=2).encode()),
    )
    done = store.done()
    groups: dict[tuple, list] = {}
    for cfg in spec.points():
        key = record_key(cfg)
        if key not in done:
            groups.setdefault(setup_group(cfg), []).append((key, cfg.to_dict(resolved=False)))
    todo = sum(len(g) for g in groups.values())
    bar = tqdm(total=todo, unit="run", desc=spec.name, disable=None if progress is None else not progress)
    batches = [[(cfg, spec.save) for _, cfg in g] for g in groups.values()]
    keys = [[k for k, _ in g] for g in groups.values()]
    if todo == 0:
        bar.close()
        write_csv(store)
        return store
    if client is not None or scheduler is not None:
        _run_dask(batches, keys, store, bar, client, scheduler)
    else:
        _run_local(batches, keys, store, bar, workers or os.cpu_count() or 1)
    bar.close()
    write_csv(store)
    return store


def _save(store: Store, keys: list[str], records: list[dict], bar) -> None:
    for key, rec in zip(keys, records):
        store.write(key, rec)
    bar.update(len(records))


def _split(batches, keys, n_parts: int):
    """Split large groups so every worker has work (each part still shares its setup)."""
    total = sum(len(b) for b in batches)
    size = max(1, math.ceil(total / max(1, 4 * n_parts)))
    out_b, out_k = [], []
    for b, k in zip(batches, keys):
        for i in range(0, len(b), size):
            out_b.append(b[i : i + size])
            out_k.append(k[i : i + size])
    return out_b, out_k


def _run_local(batches, keys, store, bar, workers: int) -> None:
    batches, keys = _split(batches, keys, workers)
    if workers <= 1:
        for b, k in zip(batches, keys):
            _save(store, k, run_group(b), bar)
        return
    ctx = mp.get_context("spawn")  # Numba's threads do not survive fork
    saved = {k: os.environ.get(k) for k in _WORKER_ENV}
    os.environ.update(_WORKER_ENV)  # spawned workers read these before importing numpy
    try:
        pool = ctx.Pool(workers)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    with pool:
        jobs = {i: pool.apply_async(run_group, (b,)) for i, b in enumerate(batches)}
        while jobs:
            for i in [i for i, j in jobs.items() if j.ready()]:
                _save(store, keys[i], jobs.pop(i).get(), bar)
            time.sleep(0.02)


def _run_dask(batches, keys, store, bar, client, scheduler) -> None:
    from distributed import Client, as_completed

    own = client is None
    client = client or Client(scheduler)
    try:
        futures = {client.submit(run_group, b, pure=False): k for b, k in zip(batches, keys)}
        for fut in as_completed(futures):
            _save(store, futures[fut], fut.result(), bar)
    finally:
        if own:
            client.close()


def load_records(root: str | Path) -> list[dict]:
    return Store(Path(root)).records()
