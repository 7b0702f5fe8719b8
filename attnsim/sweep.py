"""Sweeps: a declarative grid of configurations x seeds, run by long-lived
workers into a resumable store of records.

A sweep file (TOML)::

    [sweep]
    name = "heatmap"           # records go to <out>/<name>/ (default out: sweeps/)
    seeds = [0]                # a list, or an int n meaning 0..n-1
    save = ["train_loss"]      # optional trajectory arrays kept in each record
    data = "digits"            # optional: what run --data takes, for every point

    [base]                     # config keys shared by every point
    steps = 1000

    [grid]                     # config keys to vary: lists or ranges
    signal_norm = {start = 5, stop = 100, num = 39}     # inclusive linspace
    d = {start = 250, stop = 5000, step = 125}           # inclusive arange

Instead of a grid, explicit points: ``[[point]]`` tables of config keys (each
with the base keys, for every seed), e.g. the three settings of figure 2.

Everything is validated before anything runs, each point included (a point
that could never run is refused up front).

Each point is one JSON record named by a hash of its full resolved config and
the schema version, written atomically (temporary file + rename) by the
process that computed it as soon as it is finished: kill a sweep at any
moment and nothing finished is lost, nothing half-written is read; rerunning
skips finished points, retries failed ones and recomputes damaged records
(moved aside to ``records/damaged/``). A lock per record (``flock``, released
when its holder dies) lets two sweeps share one folder without computing a
point twice. Points are grouped by what the reduced engine's setup depends on
(d, seed, ...) and each group goes to one worker, so a group pays for its
setup once. A worker that dies (the out-of-memory killer sends SIGKILL) is
replaced and its unfinished points are re-queued; a point that kills two
workers is recorded as failed. ``records.csv`` is a tidy table of the
current sweep file's records.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import hashlib
import io
import itertools
import json
import math
import multiprocessing as mp
import os
import re
import signal
import sys
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .config import KEYS, Config, ConfigError, from_mapping, read_toml, suggest, unknown_key_message
from .parallel import end_process, on_signal
from .results import SCHEMA_VERSION, WriteError, atomic_write, file_hash, json_safe

META_KEYS = ("name", "seeds", "save", "data")
MAX_POINTS = 1_000_000  # grid points x seeds in one sweep file
MAX_DEATHS = 2  # workers a point may take down with it before it is recorded as failed
TAIL_POINTS = 8  # points per task of a setup group whose setup is cheap (see _chunks)
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass
class SweepSpec:
    """A parsed sweep: its name, seeds, base config, grid axes and saved arrays."""

    name: str
    seeds: list[int]
    base: dict[str, Any]
    grid: dict[str, list]
    save: list[str] = field(default_factory=list)
    extra: list[dict[str, Any]] = field(default_factory=list)  # explicit points ([[point]] tables)
    data: str | None = None  # a built-in dataset name or an absolute path (run --data)
    data_id: str | None = None  # what the records' keys know of the data: the name or the file's hash
    _points: tuple = field(default=(None, []), repr=False, compare=False)  # (the spec they are of, points)

    def points(self) -> list[Config]:
        """Every (grid point, seed) as a validated Config, in grid order, then
        every explicit point (with the base keys) for every seed (validated once
        per content of the spec: a 39 x 39 grid takes 0.4 s)."""
        now = json.dumps(self.to_dict(), sort_keys=True)
        if self._points[0] != now:
            self._points = (now, self._validated_points())
        return list(self._points[1])

    def _validated_points(self) -> list[Config]:
        keys = list(self.grid)
        combos = [dict(zip(keys, c)) for c in itertools.product(*(self.grid[k] for k in keys))]
        out = []
        for point in self.extra or combos:
            for seed in self.seeds:
                values = {**self.base, **point, "seed": seed}
                try:
                    out.append(from_mapping(values))
                except ConfigError as exc:
                    at = ", ".join(f"{k}={v}" for k, v in point.items())
                    raise ConfigError(f"{exc} (point {at or 'base'}, seed {seed})") from None
        return out

    def to_dict(self) -> dict:
        return json_safe({k: v for k, v in self.__dict__.items() if not k.startswith("_")})

    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:10]


def _axis(key: str, spec: Any) -> list:
    """The values of one grid axis: a list, or an inclusive range {start, stop, num | step}."""
    if isinstance(spec, list):
        vals = spec
    elif isinstance(spec, dict):
        vals = _range(key, spec)
    else:
        vals = [spec]
    if not vals:
        raise ConfigError(f"grid.{key}: no values")
    for v in vals:
        if isinstance(v, (list, dict)):
            raise ConfigError(f"grid.{key}: values must be numbers, strings or booleans, got {v!r}")
    if len({json.dumps(v) for v in vals}) < len(vals):
        raise ConfigError(f"grid.{key}: duplicate values {vals}")
    return vals


def _range(key: str, spec: dict) -> list:
    extra = set(spec) - {"start", "stop", "num", "step"}
    if extra or not {"start", "stop"} <= set(spec) or ("num" in spec) == ("step" in spec):
        raise ConfigError(f"grid.{key}: a range is {{start, stop, num}} or {{start, stop, step}}, got {spec}")
    nums = {k: v for k, v in spec.items()}
    for k, v in nums.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"grid.{key}.{k}: expected a finite number, got {v!r}")
    start, stop = spec["start"], spec["stop"]
    if "num" in spec:
        num = spec["num"]
        if not isinstance(num, int) or not 1 <= num <= MAX_POINTS:
            raise ConfigError(f"grid.{key}.num: an integer from 1 to {MAX_POINTS}, got {num!r}")
        if num == 1 and start != stop:
            raise ConfigError(f"grid.{key}: num = 1 needs start = stop")
        return [float(v) for v in np.linspace(start, stop, num)]
    step = spec["step"]
    if step == 0 or (stop - start) * step < 0:
        raise ConfigError(f"grid.{key}: step {step} never goes from {start} to {stop}")
    count = math.floor((stop - start) / step + 1e-9) + 1
    if count > MAX_POINTS:
        raise ConfigError(f"grid.{key}: {count:.3g} values (at most {MAX_POINTS})")
    vals = [start + i * step for i in range(count)]
    if all(isinstance(spec[k], int) for k in ("start", "stop", "step")):
        return [int(v) for v in vals]
    return [float(v) for v in vals]


def _table(data: dict, name: str) -> dict:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"sweep file: [{name}] must be a table, got {value!r}")
    return value


def _seeds(value: Any) -> list[int]:
    if isinstance(value, bool) or not isinstance(value, (int, list)):
        raise ConfigError(f"sweep.seeds: a count >= 1 or a list of integers >= 0, got {value!r}")
    if isinstance(value, int):
        if not 1 <= value <= MAX_POINTS:
            raise ConfigError(f"sweep.seeds: a count from 1 to {MAX_POINTS}, got {value}")
        return list(range(value))
    if not value or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value):
        raise ConfigError(f"sweep.seeds: a non-empty list of integers >= 0, got {value!r}")
    if len(set(value)) < len(value):
        raise ConfigError(f"sweep.seeds: duplicate seeds {value}")
    return value


def _save(value: Any) -> list[str]:
    from .metrics import TRAJECTORY_KEYS

    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(v, str) for v in names):
        raise ConfigError(f"sweep.save: a list of trajectory array names, got {value!r}")
    for v in names:
        if v not in TRAJECTORY_KEYS:
            near = suggest(v, TRAJECTORY_KEYS)
            hint = f"; did you mean {near!r}?" if near else ""
            raise ConfigError(f"sweep.save: {v!r} is not a trajectory array{hint}")
    return list(dict.fromkeys(names))


def parse_sweep(data: dict, name: str = "sweep", base_dir: Path = Path(".")) -> SweepSpec:
    """Validate a sweep mapping (as read from TOML), every point included
    (``base_dir``: where a relative ``[sweep] data`` file is)."""
    from .engines import check_resources, choose_engine

    unknown = set(data) - {"sweep", "base", "grid", "point"}
    if unknown:
        tables = "[sweep], [base], [grid], [[point]]"
        raise ConfigError(f"sweep file: unknown table(s) {sorted(unknown)}; use {tables}")
    extra = data.get("point", [])
    if not isinstance(extra, list) or not all(isinstance(p, dict) for p in extra):
        raise ConfigError("sweep file: [[point]] must be tables of config keys")
    meta, base, grid = (dict(_table(data, t)) for t in ("sweep", "base", "grid"))
    for key in meta:
        if key not in META_KEYS:
            near = suggest(key, META_KEYS)
            hint = f"; did you mean {near!r}?" if near else f"; valid keys: {', '.join(META_KEYS)}"
            raise ConfigError(f"sweep.{key}: unknown key{hint}")
    sweep_name = meta.get("name", name)
    if not isinstance(sweep_name, str) or not NAME_RE.fullmatch(sweep_name) or ".." in sweep_name:
        raise ConfigError(
            f"sweep.name: {sweep_name!r} must be a plain folder name (letters, digits, '_', '-', '.')"
        )
    for key in list(base) + list(grid) + [k for p in extra for k in p]:
        if key == "seed":
            raise ConfigError("seed: set seeds in [sweep] seeds, not as a config key")
        if key not in KEYS:
            raise ConfigError(unknown_key_message(key))
    both = set(base) & set(grid)
    if both:
        raise ConfigError(f"{sorted(both)[0]}: set in both [base] and [grid]")
    spec = SweepSpec(
        name=sweep_name,
        seeds=_seeds(meta.get("seeds", [0])),
        base=base,
        grid={k: _axis(k, v) for k, v in grid.items()},
        save=_save(meta.get("save", [])),
        extra=[dict(p) for p in extra],
    )
    if spec.extra and spec.grid:
        raise ConfigError("sweep file: use either [grid] or [[point]] tables, not both")
    total = (len(spec.extra) or math.prod(len(v) for v in spec.grid.values())) * len(spec.seeds)
    if total > MAX_POINTS:
        raise ConfigError(f"sweep: {total:.3g} points (grid x seeds); at most {MAX_POINTS}")
    opened = None
    if "data" in meta:
        spec.data, spec.data_id, opened = _data(meta["data"], base_dir)
    points = spec.points()
    _check_distinct(spec, points)
    if opened is not None:
        _check_data_keys(spec, opened)
    for cfg in points:  # every point now, before anything runs (with data, n, T, d come from it)
        if spec.data is None:
            engine, _ = choose_engine(cfg, user_data=False)
            check_resources(cfg, engine)
    return spec


def read_spec(path: str | Path) -> SweepSpec:
    """A sweep file (TOML), validated whole."""
    return parse_sweep(read_toml(path, "sweep"), name=Path(path).stem, base_dir=Path(path).parent)


def record_key(cfg: Config, data_id: str | None = None) -> str:
    """Hash of the full resolved config, the data (when given) and the schema version."""
    return _key_of(cfg.to_dict(), data_id)


def _key_of(config: dict, data_id: str | None) -> str:
    ident: dict[str, Any] = {"schema": SCHEMA_VERSION, "config": config}
    if data_id is not None:
        ident["data"] = data_id
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


class Task(NamedTuple):
    """One point to compute: its record key, config (unresolved keys), saved arrays and data
    (``data_id``: what the key knows of the data)."""

    key: str
    config: dict
    save: list[str]
    data: str | None = None
    data_id: str | None = None


def _data(value: Any, base_dir: Path):
    """(what to pass as data, its identity, the opened data) for ``[sweep] data``:
    a built-in dataset name, or a file (relative to the sweep file's folder),
    read and checked now, and its hash."""
    from .realdata import BUILTIN, open_data

    if not isinstance(value, str) or not value:
        raise ConfigError(f"sweep.data: expected a file name or a built-in dataset ({', '.join(BUILTIN)})")
    if value in BUILTIN:
        return value, value, open_data(value)
    path = (base_dir / value).resolve()
    if not path.exists():
        raise ConfigError(f"sweep.data: {path}: no such file (built-in datasets: {', '.join(BUILTIN)})")
    opened = open_data(path)  # the whole file checked now, not when its first point runs
    return str(path), "sha256:" + file_hash(path), opened


def _check_data_keys(spec: SweepSpec, opened) -> None:
    """Refuse sweep keys the data decides: every value would be the same run."""
    from .data import decided_keys
    from .realdata import Source

    if isinstance(opened, Source):
        decided = {k: f"{who} decides it" for k, who in opened.decided_keys().items()}
    else:
        decided = {
            k: f"the data file decides it (its array {src})" for k, src in decided_keys(opened).items()
        }
    for where, keys in (
        ("[grid]", spec.grid),
        ("[base]", spec.base),
        ("[[point]]", [k for p in spec.extra for k in p]),
    ):
        for key in keys:
            if key in decided:
                raise ConfigError(f"{key}: {decided[key]}; remove it from {where}")
    if isinstance(opened, Source):
        for d in sorted({c.d for c in spec.points()}):
            opened.check_memory(d)


def _check_distinct(spec: SweepSpec, points: list[Config]) -> None:
    """Refuse two points that are the same run (one record, computed once, counted twice)."""
    seen: dict[str, int] = {}
    per_seed = len(spec.seeds)
    for i, cfg in enumerate(points):
        key = record_key(cfg, spec.data_id)
        if key in seen:
            j = seen[key] // per_seed
            if spec.extra:
                raise ConfigError(f"sweep: point {i // per_seed + 1} is the same run as point {j + 1}")
            combos = list(itertools.product(*spec.grid.values()))
            at = lambda c: ", ".join(f"{k}={v!r}" for k, v in zip(spec.grid, c))  # noqa: E731
            raise ConfigError(f"grid: {at(combos[i // per_seed])} is the same run as {at(combos[j])}")
        seen[key] = i


def setup_group(cfg: Config) -> tuple:
    """Points that share a reduced setup (:func:`attnsim.engines.setup_key`) run in one worker."""
    from .engines import setup_key

    return (*setup_key(cfg), cfg.engine)


def run_point(cfg_dict: dict, save: list[str], data: str | None = None) -> dict:
    """Simulate one point and return its record. The process keeps the draws
    of W(0) from then on (:class:`attnsim.data.KeptDraws`): the sweep's points
    of the same seed and a smaller d read them instead of drawing them. Python
    warnings go into the record's "warnings" (the sweep's summary reports them
    once), not onto the worker's stderr."""
    from .data import KEPT_DRAWS
    from .run import simulate

    KEPT_DRAWS.enabled = True
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            # a Config, not the mapping: with data, warn only about keys set away from their defaults
            res = simulate(from_mapping(cfg_dict), data=data)
        except Exception as exc:  # a failed point is recorded, the sweep goes on
            return _failed_record(cfg_dict, f"{type(exc).__name__}: {exc}", _messages(caught))
    rec = {
        "schema_version": SCHEMA_VERSION,
        "status": "ok",
        "config": res.config,
        "engine": res.engine,
        "final": res.final,
        "theory": res.theory,
        **({"limit": res.limit} if res.limit is not None else {}),
        "warnings": list(dict.fromkeys(res.warnings + _messages(caught))),
        **({"data": {"source": res.data["source"], "n_noisy": res.data["n_noisy"]}} if data else {}),
        "versions": res.versions,
        "threads": res.threads,
        "git": res.git,
        "elapsed_s": res.elapsed_s,
        "setup_s": res.setup_s,
        "wall_s": time.perf_counter() - t,
    }
    if save:
        rec["trajectory"] = {k: res.trajectory[k] for k in ["step", *save] if k in res.trajectory}
    return json_safe(rec)


def _messages(caught) -> list[str]:
    return list(dict.fromkeys(str(w.message) for w in caught))


def _failed_record(cfg_dict: dict, error: str, warned: list[str] | None = None) -> dict:
    rec = {"schema_version": SCHEMA_VERSION, "status": "failed", "config": cfg_dict, "error": error}
    return json_safe({**rec, "warnings": warned or []})


# the final metrics that are words; the rest are numbers or null
TEXT_FINAL = ("regime", "regime_rule", "clean_twin")


def _numbers(value) -> bool:
    """A number, null, or (nested) lists of them: what every metric is in JSON."""
    if isinstance(value, list):
        return all(_numbers(v) for v in value)
    return value is None or isinstance(value, (int, float))


def record_problem(key: str, rec, data_id: str | None = None) -> str | None:
    """Why ``rec`` is not the record of ``key`` (None: it is): a JSON object of
    this schema whose point hashes to ``key``, with its sections and types
    (``data_id``: the data of the sweep reading it, for records that do not say)."""
    if not isinstance(rec, dict):
        return "not a JSON object"
    if rec.get("status") not in ("ok", "failed"):
        return "no status 'ok' or 'failed'"
    if rec.get("schema_version") != SCHEMA_VERSION:
        return f"schema version {rec.get('schema_version')!r}, not {SCHEMA_VERSION}"
    if not isinstance(rec.get("config"), dict):
        return "no config"
    if rec.get("key", key) != key:
        return f"the record of another point ({rec['key']})"
    point = rec.get("point", rec["config"])
    if not isinstance(point, dict) or not _hashes_to(point, rec.get("data_id", data_id), key):
        return "its config does not hash to its file name"
    if rec["status"] == "failed":
        return None if isinstance(rec.get("error"), str) else "a failed record without its error"
    for section in ("final", "theory", "engine"):
        if not isinstance(rec.get(section), dict):
            return f"no {section} section"
    for k, v in rec["final"].items():
        if not (isinstance(v, str) or v is None if k in TEXT_FINAL else _numbers(v)):
            return f"final.{k} is {v!r}"
    traj = rec.get("trajectory", {})
    if not isinstance(traj, dict) or not all(isinstance(v, list) and _numbers(v) for v in traj.values()):
        return "a trajectory that is not arrays of numbers"
    return None


def _hashes_to(point: dict, data_id: str | None, key: str) -> bool:
    """Whether a point's config as written has the record key ``key`` (a
    resolved config hashes as it is; anything else is validated first)."""
    if _key_of(point, data_id) == key:
        return True
    try:
        return record_key(from_mapping(point), data_id) == key
    except (ConfigError, TypeError):
        return False


class Store:
    """One JSON file per record under ``root/records``; writes are atomic, and
    every record read is verified (:func:`record_problem`)."""

    def __init__(self, root: Path, data_id: str | None = None):
        self.root = Path(root)
        self.dir = self.root / "records"
        self.data_id = data_id  # the data of the sweep using the store (records written earlier may not say)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WriteError(f"{self.dir}: cannot create the records folder ({exc.strerror})") from None
        self.damaged: list[str] = []

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def read(self, key: str) -> dict | None:
        """The record of ``key``; None when missing. A damaged record (not valid
        JSON, another point's, another schema's, a section or type missing) is
        moved aside to records/damaged/ and reported."""
        path = self.path(key)
        try:
            with open(path, "rb") as fh:
                rec = json.loads(fh.read())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            rec, problem = None, "not valid JSON"
        else:
            problem = record_problem(key, rec, self.data_id)
        if problem is not None:
            self._move_aside(path, problem)
            return None
        return rec

    def _move_aside(self, path: Path, problem: str) -> None:
        aside = self.dir / "damaged"
        try:
            aside.mkdir(exist_ok=True)
            os.replace(path, aside / f"{path.name}.{time.strftime('%Y%m%d-%H%M%S')}")
        except FileNotFoundError:
            return  # another sweep moved it first
        except OSError as exc:
            raise WriteError(
                f"{path}: a damaged record ({problem}) cannot be moved aside ({exc.strerror})"
            ) from None
        self.damaged.append(f"{path.name} ({problem})")

    def done(self) -> set[str]:
        """Keys whose record finished successfully."""
        return {p.stem for p in self.dir.glob("*.json") if (self.read(p.stem) or {}).get("status") == "ok"}

    def write(self, key: str, record: dict) -> None:
        """Atomically; without fsync (a record lost to an OS crash is detected
        as missing or damaged on the next run and recomputed). A failure of the
        file system raises :class:`attnsim.results.WriteError` naming the file."""
        text = json.dumps(record, sort_keys=True)
        atomic_write(self.path(key), lambda fh: fh.write(text.encode()), durable=False)

    def records(self, keys: list[str] | None = None) -> list[dict]:
        """Records of ``keys`` (all records when None), in that order; missing ones skipped."""
        if keys is None:
            keys = sorted(p.stem for p in self.dir.glob("*.json"))
        return [r for r in (self.read(k) for k in keys) if r is not None]

    @contextlib.contextmanager
    def lock(self, key: str):
        """Hold the lock of one record. While another process holds it, says so
        once on stderr (naming the record and the holder's pid), then waits."""
        path = self.dir / f"{key}.lock"
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as exc:
            raise WriteError(f"{path}: cannot create the record's lock ({exc.strerror})") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                print(f"attnsim: waiting for {path}: another process (pid {holder}) is computing this point",
                      file=sys.stderr, flush=True)  # fmt: skip
                fcntl.flock(fd, fcntl.LOCK_EX)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # after the record is written: a waiter then finds it done
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def compute(self, task: Task) -> bool:
        """Compute and write one record unless it is done (maybe by another
        sweep in the same folder); True when it was computed here."""
        with self.lock(task.key):
            rec = self.read(task.key)
            if rec is not None and rec.get("status") == "ok":
                return False
            self.write(task.key, stamped(task, run_point(task.config, task.save, task.data)))
            return True


def stamped(task: Task, rec: dict) -> dict:
    """A point's record with what :func:`record_problem` verifies it by: its key
    (a record copied over another point's file is then recognized) and, with
    data, the point and data its key is of (its config is what the data decided)."""
    rec["key"] = task.key
    if task.data is not None:
        rec["point"], rec["data_id"] = task.config, task.data_id
    return rec


def _flat(rec: dict) -> dict:
    row = {"status": rec.get("status")}
    row.update({f"config.{k}": v for k, v in rec.get("config", {}).items()})
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


def write_csv(store: Store, keys: list[str] | None = None, path: Path | None = None,
              records: list[dict] | None = None) -> Path:  # fmt: skip
    """A tidy table of the records of ``keys`` (one row per run; ``records``:
    those records, already read)."""
    rows = [_flat(r) for r in (store.records(keys) if records is None else records)]
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


@dataclass
class SweepReport:
    """What a sweep run did: the store, the current sweep's keys and counts."""

    store: Store
    keys: list[str]
    ok: int = 0
    failed: int = 0
    retried: int = 0
    scheduled: int = 0  # points not done when the sweep started
    computed: int = 0  # points computed by this sweep (another sweep may have done some)
    workers: int = 0  # worker processes started (0: everything ran in this process)
    messages: list[str] = field(default_factory=list)
    final: dict[str, dict | None] | None = field(default=None, repr=False)  # the records as the sweep ended

    def records(self) -> list[dict]:
        """The sweep's records in grid order (as read when it ended; missing ones skipped)."""
        if self.final is None:
            return self.store.records(self.keys)
        return [r for r in (self.final.get(k) for k in self.keys) if r is not None]

    @property
    def root(self) -> Path:
        return self.store.root

    def finished(self, key: str, computed: bool, bar) -> None:
        """A point's record was written (``computed``: by this sweep): read it now,
        while the sweep is otherwise waiting, rather than all records at the end."""
        self.computed += computed
        self.final[key] = self.store.read(key)
        bar.update(1)


def run_sweep(
    spec: SweepSpec,
    out: str | Path = "sweeps",
    workers: int | None = None,
    scheduler: str | None = None,
    client=None,
    progress: bool | None = None,
) -> SweepReport:
    """Run every unfinished point of ``spec``; returns a :class:`SweepReport`.

    workers: local processes (default: the number of cores, never more than
    there are tasks; one task runs in this process). scheduler / client: a
    Dask distributed scheduler address or Client, used instead of local
    processes (its records are written here as each group finishes).
    """
    from tqdm.auto import tqdm

    if scheduler is not None and client is None:
        client = _connect(scheduler)  # before anything is written
    own_client = scheduler is not None
    started: list[_Worker] = []
    try:
        store = Store(Path(out) / spec.name, spec.data_id)
        _write_spec(store, spec)
        points = spec.points()
        keys = [record_key(c, spec.data_id) for c in points]
        report = SweepReport(store, keys)
        n = workers or os.cpu_count() or 1
        missing = len({f"{k}.json" for k in keys} - set(os.listdir(store.dir)))
        if client is None and n > 1 and missing and spec.data is None:
            n = _workers_that_fit(points, n, report)
        # many records to compute: the workers start loading now, while the records are read and sorted
        started = _take_workers(n, report) if client is None and n > 1 and missing >= 4 * n else []
        before = {k: store.read(k) for k in keys}
        report.retried = sum(1 for r in before.values() if r is not None and r.get("status") != "ok")
        groups: dict[tuple, list] = {}
        setup: dict[tuple, float] = {}  # flops of each group's setup and of its points' steps
        steps: dict[tuple, float] = {}
        for key, cfg in zip(keys, points):
            rec = before[key]
            if rec is None or rec.get("status") != "ok":
                task = Task(key, cfg.to_dict(resolved=False), spec.save, spec.data, spec.data_id)
                group = setup_group(cfg)
                groups.setdefault(group, []).append(task)
                setup.setdefault(group, _setup_flops(cfg))
                steps[group] = steps.get(group, 0.0) + _flops(cfg, spec.data)
        # costliest setup groups first, so the last tasks to finish are short ones
        order = sorted(groups, key=lambda g: -(setup[g] + steps[g]))
        tasks = [
            t for g in order for t in _chunks(groups[g], len(keys), n, setup[g], steps[g] / len(groups[g]))
        ]
        report.scheduled = sum(len(t) for t in tasks)
        report.final = {}  # filled as points finish (SweepReport.finished)
        bar = tqdm(total=report.scheduled, unit="run", desc=spec.name,
                   disable=None if progress is None else not progress)  # fmt: skip
        try:
            if client is not None:
                _run_dask(tasks, store, bar, client, report)
            else:
                handed, started = started, []  # _run_local releases them
                _run_local(tasks, store, bar, min(n, len(tasks)), report, handed)
        finally:
            bar.close()
    finally:
        _release(started)
        if own_client:
            client.close()
    done = report.final or {}
    final = report.final = {k: done[k] if k in done else store.read(k) for k in keys}
    report.ok = sum(1 for r in final.values() if r is not None and r.get("status") == "ok")
    report.failed = sum(1 for r in final.values() if r is not None and r.get("status") != "ok")
    if store.damaged:
        report.messages.append(
            f"moved {len(store.damaged)} damaged record(s) to {store.dir / 'damaged'} and recomputed them: "
            + ", ".join(sorted(set(store.damaged)))
        )
    if report.retried:
        report.messages.append(f"retried {report.retried} point(s) that had failed before")
    report.messages += _outcomes(final)
    write_csv(store, keys, records=report.records())
    return report


def _workers_that_fit(points: list[Config], n: int, report: SweepReport) -> int:
    """At most ``n`` local workers, and no more than fit in memory together when
    each computes the sweep's largest point (every point was checked alone when
    the sweep was read)."""
    from .engines import _bytes, choose_engine, memory_estimate, physical_memory

    need = max(sum(b for *_, b in memory_estimate(c, choose_engine(c, user_data=False)[0])) for c in points)
    have = physical_memory()
    fit = max(1, int(0.8 * have // need))
    if fit >= n:
        return n
    report.messages.append(
        f"running {fit} worker(s), not {n}: the largest point needs about {_bytes(need)} of memory "
        f"and this machine has {_bytes(have)}"
    )
    return fit


def _outcomes(final: dict[str, dict | None]) -> list[str]:
    """Each distinct reason points failed for, and each distinct warning of
    the records, once, with how many points it concerns."""
    failed: dict[str, int] = {}
    warned: dict[str, int] = {}
    for rec in final.values():
        if rec is None:
            continue
        if rec.get("status") != "ok":
            failed[rec.get("error", "?")] = failed.get(rec.get("error", "?"), 0) + 1
        for w in dict.fromkeys(rec.get("warnings") or []):
            warned[w] = warned.get(w, 0) + 1
    out = [f"{k} point(s) failed: {why}" for why, k in failed.items()]
    return out + [f"warning ({k} point(s)): {w}" for w, k in warned.items()]


def _connect(scheduler: str):
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError("--scheduler: needs dask; pip install 'attnsim[dask]'") from None
    try:
        return Client(scheduler, timeout=10)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"--scheduler: cannot connect to {scheduler!r} ({type(exc).__name__}: {exc})"
        ) from None


def _write_spec(store: Store, spec: SweepSpec) -> None:
    """sweep.json describes the current grid; an earlier different grid's file
    is kept as sweep.<its hash>.json."""
    path = store.root / "sweep.json"
    text = json.dumps(spec.to_dict(), indent=2)
    if path.exists():
        old = path.read_bytes()
        if old == text.encode():
            return
        digest = hashlib.sha256(old).hexdigest()[:10]
        os.replace(path, store.root / f"sweep.{digest}.json")
    atomic_write(path, lambda fh: fh.write(text.encode()))


def _flops(cfg: Config, data: str | None) -> float:
    """Flops of a point's steps (:func:`attnsim.engines.step_flops`; for
    ordering the work only: with data, n, T and d are not known here)."""
    from .engines import choose_engine, step_flops

    return 0.0 if data is not None else cfg.steps * step_flops(cfg, choose_engine(cfg, user_data=False)[0])


def _setup_flops(cfg: Config) -> float:
    """Flops of a reduced setup shared by a group: two d x d x k products, k about n T + 2."""
    return 4.0 * cfg.d * cfg.d * (cfg.n * cfg.T + 2) if cfg.engine != "dense" else 0.0


def _chunks(
    group: list, total: int, workers: int, setup_flops: float = 0.0, point_flops: float = 0.0
) -> list[list]:
    """Split a setup group so every worker has work (each part still shares
    its setup). A group whose setup costs at most a tenth of ``TAIL_POINTS``
    of its points goes in parts of ``TAIL_POINTS`` (each worker that takes a
    part builds the setup again): the cheap groups run last, and short last
    tasks keep one core from idling while the other finishes a long one."""
    size = max(1, math.ceil(total / max(1, 4 * workers)))
    if point_flops > 0 and setup_flops <= 0.1 * TAIL_POINTS * point_flops:
        size = min(size, TAIL_POINTS)
    return [group[i : i + size] for i in range(0, len(group), size)]


# -- local processes ------------------------------------------------------------

_WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}


def _worker_main(conn) -> None:
    """A worker: loads the kernels, then receives tasks (a store folder and a
    list of points), computes and writes each record, and reports ("done",
    key, status) per point and ("idle",) per task."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C

    def _term():
        raise SystemExit(143)  # unwinds: temporary files are removed, locks released

    on_signal(signal.SIGTERM, _term)
    code = 0
    try:
        _serve(conn)
    except SystemExit as exc:  # SIGTERM, after unwinding (temporary files removed, locks released)
        code = exc.code if isinstance(exc.code, int) else 1
    end_process(code)  # every record is written and closed; the parent would wait for a teardown


def _serve(conn) -> None:
    """Load the kernels, then compute the tasks the parent sends until it sends None."""
    with contextlib.suppress(Exception):  # while the parent prepares the work (a failure shows in the points)
        from .run import ensure_compiled

        ensure_compiled()
    stores: dict[str, Store] = {}
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                return
            root, task = msg
            try:
                store = stores.setdefault(root, Store(Path(root)))
                for point in task:
                    conn.send(("done", point.key, store.compute(point)))
            except WriteError as exc:  # a full disk, a read-only folder: the parent stops the sweep
                conn.send(("write-error", str(exc)))
                return
            conn.send(("idle",))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the parent is gone: nothing to report to


class _Worker:
    def __init__(self, ctx):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.task: list | None = None  # the points sent and not yet reported


_SHARED: list[_Worker] | None = None  # idle workers kept between sweeps inside worker_pool()


@contextlib.contextmanager
def worker_pool(start: int = 0):
    """Keep the local worker processes a sweep starts for the next sweeps run
    inside the block; they stop when it ends.

    A worker spends about a second importing attnsim and loading its kernels
    before its first point; later sweeps in the block (``attnsim figures``
    makes several) do not pay that again. ``start``: workers to start at
    once, when the caller knows there is work (their loading then overlaps
    whatever it does before its first sweep). Without this block each sweep
    stops its workers when it ends. Nested blocks share the outer one's workers.
    """
    global _SHARED
    if _SHARED is not None:
        yield
        return
    _SHARED = [_spawn() for _ in range(start)] if start > 1 else []  # one alone: sweeps run here
    try:
        yield
    finally:
        pool, _SHARED = _SHARED, None
        _stop(pool, idle_exit=False)


def _take_workers(n: int, report: SweepReport) -> list[_Worker]:
    """``n`` workers: the block's idle ones first (:func:`worker_pool`), new ones for the rest."""
    pool: list[_Worker] = []
    while _SHARED and len(pool) < n:
        w = _SHARED.pop(0)
        if w.proc.exitcode is None:
            pool.append(w)
        else:
            w.conn.close()
    pool += [_spawn() for _ in range(n - len(pool))]
    report.workers += len(pool)
    return pool


def _release(pool: list[_Worker]) -> None:
    """Idle workers back to the block's pool (:func:`worker_pool`), or stopped outside one."""
    if _SHARED is not None:
        _SHARED.extend(w for w in pool if w.proc.exitcode is None and not w.task)
        _stop([w for w in pool if w.proc.exitcode is not None or w.task])
    else:
        _stop(pool)


def _spawn() -> _Worker:
    saved = {k: os.environ.get(k) for k in _WORKER_ENV}
    os.environ.update(_WORKER_ENV)  # spawned workers read these before importing numpy
    try:
        return _Worker(mp.get_context("spawn"))  # Numba's threads do not survive fork
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run_local(tasks: list[list], store: Store, bar, workers: int, report: SweepReport,
               started: list[_Worker]) -> None:  # fmt: skip
    """Run ``tasks`` here (``workers`` <= 1) or on ``workers`` worker processes,
    those ``started`` (already loading) first; the workers are released after."""
    pool = started[:workers] if workers > 1 else []
    _release(started[len(pool) :])
    if workers <= 1:
        for task in tasks:
            for point in task:
                report.finished(point.key, store.compute(point), bar)
        return
    queue = deque(tasks)
    deaths: dict[str, int] = {}
    try:
        pool += _take_workers(workers - len(pool), report)
        while queue or any(w.task for w in pool):
            for w in pool:
                if w.task is None and queue:
                    w.task = list(queue.popleft())
                    w.conn.send((str(store.root), w.task))
            wait([w.conn for w in pool] + [w.proc.sentinel for w in pool], timeout=1.0)
            alive = []
            for w in pool:
                _drain(w, bar, report)
                if w.proc.exitcode is None:
                    alive.append(w)
                    continue
                if w.task:  # died with unfinished points; the first was being computed
                    key = w.task[0].key
                    deaths[key] = deaths.get(key, 0) + 1
                    rest = w.task
                    if deaths[key] >= MAX_DEATHS:
                        store.write(key, _dead_record(w.task[0], w.proc.exitcode))
                        bar.update(1)
                        rest = w.task[1:]
                    if rest:
                        queue.appendleft(rest)
                    fate = "re-queued" if deaths[key] < MAX_DEATHS else f"recorded {key} as failed"
                    report.messages.append(
                        f"a worker died (exit code {w.proc.exitcode}) with {len(w.task)} point(s) "
                        f"unfinished; {fate}"
                    )
                w.conn.close()
                if queue:
                    alive.extend(_take_workers(1, report))
            pool = alive
    finally:
        _release(pool)  # on Ctrl-C busy workers are terminated, and idle ones stop or stay in the block


def _drain(w: _Worker, bar, report: SweepReport) -> None:
    """Read every message a worker has sent."""
    try:
        while w.task is not None and w.conn.poll():
            msg = w.conn.recv()
            if msg[0] == "done":
                w.task = [t for t in w.task if t[0] != msg[1]]
                report.finished(msg[1], msg[2], bar)
            elif msg[0] == "idle":
                w.task = None
            elif msg[0] == "write-error":
                raise WriteError(msg[1])
    except (EOFError, OSError):
        pass


def _dead_record(task: Task, exitcode: int | None) -> dict:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in signal.valid_signals() else str(-exitcode)
        why = f"killed by {name}" + (
            " (the out-of-memory killer sends it, as can a user)" if name == "SIGKILL" else ""
        )
    else:
        why = f"exit code {exitcode}"
    rec = _failed_record(task.config, f"the worker computing this point died {MAX_DEATHS} times ({why})")
    rec["key"] = task.key
    if task.data is not None:
        rec["data_id"] = task.data_id
    return rec


def _stop(pool: list[_Worker], idle_exit: bool = True) -> None:
    """Ask idle workers to exit (``idle_exit``; else terminate them too: one may
    still be loading its kernels, with nothing to clean up); terminate busy
    ones (Ctrl-C): they unwind and remove their temporary files; anything
    still alive after 5 s is killed."""
    for w in pool:
        if w.proc.exitcode is None:
            if w.task or not idle_exit:
                w.proc.terminate()
            else:
                with contextlib.suppress(OSError):
                    w.conn.send(None)
    deadline = time.monotonic() + 5.0
    for w in pool:
        w.proc.join(max(0.0, deadline - time.monotonic()))
        if w.proc.exitcode is None:
            w.proc.kill()
            w.proc.join()
        w.conn.close()


# -- Dask -------------------------------------------------------------------------


def run_group(items: list[Task]) -> list[tuple[str, dict]]:
    """Run the points of one setup group in order (they share the setup)."""
    return [(t.key, stamped(t, run_point(t.config, t.save, t.data))) for t in items]


def _run_dask(tasks, store: Store, bar, client, report: SweepReport) -> None:
    from distributed import as_completed

    futures = [client.submit(run_group, t, pure=False) for t in tasks]
    for fut in as_completed(futures):
        for key, rec in fut.result():
            store.write(key, rec)
            report.finished(key, True, bar)


def load_records(root: str | Path) -> list[dict]:
    return Store(Path(root)).records()


def load_spec(root: str | Path) -> SweepSpec:
    """The spec a sweep folder was last run with (its sweep.json)."""
    path = Path(root) / "sweep.json"
    try:
        data = json.loads(path.read_bytes())
        return SweepSpec(
            **{k: data[k] for k in ("name", "seeds", "base", "grid", "save", "extra", "data", "data_id")}
        )
    except FileNotFoundError:
        raise ConfigError(f"{root}: not a sweep folder (no sweep.json)") from None
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(f"{path}: not a sweep description attnsim wrote") from None


def load_sweep(root: str | Path):
    """The records of the sweep in folder ``root`` (as last run), one row per
    point and seed: columns ``config.<key>``, every final metric, ``theory.<name>``,
    ``limit.<name>``, ``status``, ``engine``, ``elapsed_s`` and ``error``. A pandas
    DataFrame when pandas is installed (``pip install 'attnsim[table]'``), else a
    dict of NumPy columns (numbers as float with NaN for missing, the rest objects)."""
    spec = load_spec(root)
    store = Store(Path(root), spec.data_id)
    rows = [_flat(r) for r in store.records([record_key(c, spec.data_id) for c in spec.points()])]
    cols = list(dict.fromkeys(k for row in rows for k in row))
    try:
        import pandas as pd
    except ImportError:
        return {c: _column([row.get(c) for row in rows]) for c in cols}
    return pd.DataFrame(rows, columns=cols)


def _column(values: list) -> np.ndarray:
    if all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values):
        return np.array([np.nan if v is None else v for v in values], dtype=float)
    return np.array(values, dtype=object)
