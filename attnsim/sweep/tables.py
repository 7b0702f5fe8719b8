"""A sweep's records as tables: the tidy CSV, ``load_sweep`` (one row per point and seed, read
from the table kept beside a packed sweep's records when it is current, :mod:`.packs`) and
``load_trajectories``."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..config import ConfigError
from ..results import DamagedFile, read_json, write_csv_table
from .packs import read_table, write_table
from .spec import SweepSpec, record_key
from .store import Store, SweepReport


@functools.cache
def _foreign_keys(model: Any, optimizer: Any) -> frozenset[str]:
    """The config keys a record of ``model`` trained by ``optimizer`` never reads: the other models'
    own keys and the other optimizers' (left out of the tables: they are at their defaults)."""
    from .. import registry  # lazy

    if model not in registry.MODELS:
        return frozenset()
    others = [k for o in registry.OPTIMIZERS if o != optimizer for k in registry.optimizer_keys(o)]
    return frozenset(registry.foreign_keys(model)) | frozenset(others)


def _flat(rec: dict) -> dict:
    row = {"status": rec.get("status")}
    config = rec.get("config", {})
    foreign = _foreign_keys(config.get("model", "attention"), config.get("optimizer", "gd"))
    row.update({f"config.{k}": v for k, v in config.items() if k not in foreign})
    row.update({k: v for k, v in rec.get("final", {}).items()})
    for k, v in rec.get("theory", {}).items():
        if not isinstance(v, dict):
            row[f"theory.{k}"] = v
    for k, v in (rec.get("limit") or {}).items():
        if not isinstance(v, (dict, list)):
            row[f"limit.{k}"] = v
    row["engine"] = rec.get("engine", {}).get("used")
    row["elapsed_s"] = rec.get("elapsed_s")
    row["error"] = rec.get("error")
    return row


def write_csv(
    store: Store,
    keys: list[str] | None = None,
    path: Path | None = None,
    records: list[dict] | None = None,
    rows: list[dict] | None = None,
) -> Path:
    """A tidy table of the records of ``keys`` (one row per run; ``records``:
    those records, already read; ``rows``: their :func:`_flat` rows)."""
    if rows is None:
        rows = [_flat(r) for r in (store.records(keys) if records is None else records)]
    cols: dict[str, None] = {}
    for row in rows:
        cols.update(dict.fromkeys(row))
    return write_csv_table(path or store.root / "records.csv", list(cols), rows, lineterminator="\r\n")


def keep_table(report: SweepReport, spec: SweepSpec, rows: list[dict]) -> None:
    """At the sweep's end: pack its records if there are many (:meth:`.store.Store.pack`, merging)
    and keep its table (``rows``: :func:`_flat` of its records) beside the pack."""
    pack = report.store.pack(merge=True)
    if pack is None and not report.store.packs.files():
        return  # one file per record: a small sweep
    only = report.store.packs.files()
    if len(only) != 1 or any(report.store.dir.glob("*.json")):
        return  # another sweep is writing here too: the table is read from the records
    recs = report.records()
    held = {
        "points": len(report.keys),
        "records": len(recs),
        "failed": sum(1 for r in recs if r.get("status") != "ok"),
    }
    write_table(only[0], spec_digest(spec), held, _columns(rows))


def load_spec(root: str | Path) -> SweepSpec:
    """The spec a sweep folder was last run with (its sweep.json)."""
    path = Path(root) / "sweep.json"
    try:
        data = read_json(path)
        return SweepSpec(
            **{k: data[k] for k in ("name", "seeds", "base", "grid", "save", "extra", "data", "data_id")}
        )
    except FileNotFoundError:
        raise ConfigError(f"{root}: not a sweep folder (no sweep.json)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:  # DamagedFile is a ValueError
        why = f" ({exc})" if isinstance(exc, DamagedFile) else ""
        raise ConfigError(f"{path}: not a sweep description attnsim wrote{why}") from None


def load_sweep(root: str | Path) -> Any:
    """The records of the sweep in folder ``root`` (as last run), one row per
    point and seed: columns ``config.<key>``, every final metric, ``theory.<name>``,
    ``limit.<name>``, ``status``, ``engine``, ``elapsed_s`` and ``error``. A pandas
    DataFrame when pandas is installed (``pip install 'attnsim[table]'``), else a
    dict of NumPy columns (numbers as float with NaN for missing, the rest objects)."""
    return sweep_table(root)[1]


def load_trajectories(root: str | Path) -> Any:
    """The trajectories the sweep in ``root`` saved (its ``save`` list), as a long
    table: one row per run and log point, with the run's ``config.<key>`` columns,
    ``step`` and each saved array (a pandas DataFrame when pandas is installed,
    else a dict of NumPy columns). A sweep that saves none is a ConfigError (its records hold
    final metrics only: :func:`load_sweep`)."""
    spec, records, _ = _current_records(root)
    if not spec.save:
        raise ConfigError(
            f"{root}: the sweep saves no trajectories (its file has no save = [...] list); load_sweep "
            'reads its final metrics, and save = ["train_loss", ...] keeps arrays in each record'
        )
    rows = []
    for rec in records:
        traj = rec.get("trajectory") or {}
        if rec.get("status") != "ok" or "step" not in traj:
            continue
        config = {f"config.{k}": v for k, v in rec.get("config", {}).items()}
        saved = [k for k, v in traj.items() if k != "step" and len(v) == len(traj["step"])]  # per-step arrays
        for i, step in enumerate(traj["step"]):
            rows.append({**config, "step": step, **{k: traj[k][i] for k in saved}})
    return _table(rows)


def sweep_table(root: str | Path) -> tuple[SweepSpec, Any, dict]:
    """(spec, :func:`load_sweep`'s table, what the table holds: ``points`` the sweep's
    point count, ``records`` those with a record, ``failed`` those whose record is a
    failure, ``damaged`` the records found damaged now and moved aside)."""
    spec = load_spec(root)
    kept = read_table(Path(root) / "records", spec_digest(spec))
    if kept is not None:  # a packed sweep's table, as its last run left it (packs.py)
        held, columns = kept
        return spec, _table_of(columns), {**held, "damaged": []}
    spec, records, damaged = _current_records(root, spec)
    held = {
        "points": len(spec.points()),
        "records": len(records),
        "failed": sum(1 for r in records if r.get("status") != "ok"),
        "damaged": damaged,
    }
    return spec, _table([_flat(r) for r in records]), held


def spec_digest(spec: SweepSpec) -> str:
    """A short hash of a sweep's description (its grid, seeds, base...)."""
    text = json.dumps(spec.to_dict(), indent=2)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _current_records(
    root: str | Path, spec: SweepSpec | None = None
) -> tuple[SweepSpec, list[dict], list[str]]:
    """The spec a sweep folder was last run with, the records of its points (read without
    creating anything) and those found damaged and moved aside while reading."""
    spec = load_spec(root) if spec is None else spec
    store = Store(Path(root), spec.data_id, create=False)
    records = store.records([record_key(c, spec.data_id) for c in spec.points()])
    return spec, records, list(store.damaged)


def _columns(rows: list[dict]) -> dict[str, list]:
    cols = dict.fromkeys(k for row in rows for k in row)
    return {c: [row.get(c) for row in rows] for c in cols}


def _table(rows: list[dict]) -> Any:
    return _table_of(_columns(rows))


def _table_of(columns: dict[str, list]) -> Any:
    """A pandas DataFrame of the columns when pandas is installed, else a dict of NumPy columns."""
    try:
        import pandas as pd  # optional dependency (the table extra)
    except ImportError:
        return {c: _column(v) for c, v in columns.items()}
    return pd.DataFrame(columns, columns=list(columns))


def _column(values: list) -> np.ndarray:
    if all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values):
        return np.array([np.nan if v is None else v for v in values], dtype=float)
    return np.array(values, dtype=object)
