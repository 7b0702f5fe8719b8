"""Sweep files: a grid (or explicit points) of configurations x seeds, checked whole
before anything runs, and the record key of each point (the package docstring has the format)."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .. import registry
from ..config import KEYS, Config, ConfigError, from_mapping, hashed, read_toml, unknown_key_message
from ..data.files import decided_keys
from ..data.real import BUILTIN, Source, open_data
from ..metrics import known_metrics
from ..results import file_hash, json_safe
from ..words import suggest

META_KEYS = ("name", "seeds", "save", "data")


MAX_POINTS = 100_000  # grid points x seeds in one sweep file (each is checked first: ~0.2 ms a point)
SHOW_CHECK = 5_000  # a sweep with more points shows a progress bar while they are checked


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
        todo = self.extra or combos
        if len(todo) * len(self.seeds) > SHOW_CHECK:
            from tqdm.auto import tqdm  # lazy: as the sweep's own bar

            todo = tqdm(todo, desc="checking the points", unit="point", leave=False)
        for point in todo:
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
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(v, str) for v in names):
        raise ConfigError(f"sweep.save: a list of trajectory array names, got {value!r}")
    for v in names:
        known = known_metrics()
        if v not in known and v.removeprefix("twin_") not in known:  # twin_: its twin's
            near = suggest(v, known)
            hint = f"; did you mean {near!r}?" if near else ""
            raise ConfigError(f"sweep.save: {v!r} is not a trajectory array{hint}")
    return list(dict.fromkeys(names))


def parse_sweep(data: dict, name: str = "sweep", base_dir: Path = Path(".")) -> SweepSpec:
    """Validate a sweep mapping (as read from TOML), every point included
    (``base_dir``: where a relative ``[sweep] data`` file is)."""
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
    bad = not isinstance(sweep_name, str) or not NAME_RE.fullmatch(sweep_name) or ".." in sweep_name
    if bad and "name" not in meta:  # the name came from the file's name
        raise ConfigError(
            f"sweep.name: the file name {sweep_name!r} cannot name the sweep's folder (letters, digits, '_', "
            "'-', '.'); set name = \"...\" in the file's [sweep] table"
        )
    if bad:
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
    twin_saves = [v for v in spec.save if v.startswith("twin_")]
    if twin_saves and all(cfg.precision_twin == "none" for cfg in points):
        raise ConfigError(
            f"sweep.save: {twin_saves[0]!r} is a precision twin's array, and no point of the sweep has a "
            "twin; set precision_twin in [base] or [grid], or drop it"
        )
    if opened is not None:
        _check_data_keys(spec, opened)
    for cfg in points:  # every point now, before anything runs (with data, n, T, d come from it)
        if spec.data is None:
            spec_ = registry.spec(cfg.model)
            engine, _ = spec_.plan(cfg, user_data=False)
            spec_.check_resources(cfg, engine)
    return spec


def read_spec(path: str | Path) -> SweepSpec:
    """A sweep file (TOML), validated whole."""
    return parse_sweep(read_toml(path, "sweep"), name=Path(path).stem, base_dir=Path(path).parent)


# the schema a point's key hashes: 5, as long as the records of later schemas hold the same
# numbers under new names (6 moved the measured times to final; a schema-5 record is read upgraded)
KEY_SCHEMA = 5


def record_key(cfg: Config, data_id: str | None = None) -> str:
    """Hash of the full resolved config, the data (when given) and the schema version."""
    return _key_of(cfg.to_dict(), data_id)


def _key_of(config: dict, data_id: str | None) -> str:
    ident: dict[str, Any] = {"schema": KEY_SCHEMA, "config": hashed(config)}
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
