"""The records of a sweep: one locked, verified JSON file per point (packed into a few files
once there are many, :mod:`.packs`), and what a sweep run did (:class:`SweepReport`); the
tidy CSV and reading a finished sweep back as a table are in :mod:`.tables`."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import ConfigError, from_mapping
from ..results import (
    SCHEMA_VERSION,
    UPGRADED,
    DamagedFile,
    WriteError,
    atomic_write,
    read_json,
    upgraded,
)
from . import packs as packing
from .packs import Packs, folder_locked
from .spec import Task, _key_of, record_key

# the final metrics that are words; the rest are numbers or null
TEXT_FINAL = ("regime", "regime_rule", "clean_twin")


def _numbers(value) -> bool:
    """A number, null, or (nested) lists of them: what every metric is in JSON."""
    if isinstance(value, list):
        return all(_numbers(v) for v in value)
    return value is None or isinstance(value, (int, float))


def record_problem(key: str, rec: Any, data_id: str | None = None) -> str | None:
    """Why ``rec`` is not the record of ``key`` (None: it is): a JSON object of
    this schema whose point hashes to ``key``, with its sections and types
    (``data_id``: the data of the sweep reading it, for records that do not say)."""
    if not isinstance(rec, dict):
        return "not a JSON object"
    if rec.get("status") not in ("ok", "failed"):
        return "no status 'ok' or 'failed'"
    if rec.get("schema_version") not in (SCHEMA_VERSION, *UPGRADED):
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
    steps = len(traj.get("step", ()))
    short = [k for k, v in traj.items() if k in rec["final"] and len(v) != steps]
    if short:  # a metric (it has a final value) has one entry per logged step; roles, fit_step... do not
        return f"trajectory.{short[0]} holds {len(traj[short[0]])} entries for {steps} logged steps"
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
    """One JSON file per record under ``root/records`` (many of them packed, :mod:`.packs`);
    writes are atomic, and every record read is verified (:func:`record_problem`)."""

    def __init__(self, root: Path, data_id: str | None = None, create: bool = True):
        self.root = Path(root)
        self.dir = self.root / "records"
        self.data_id = data_id  # the data of the sweep using the store (records written earlier may not say)
        if create:  # a reader (attnsim plot, load_sweep) creates nothing
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise WriteError(f"{self.dir}: cannot create the records folder ({exc.strerror})") from None
        self.damaged: list[str] = []
        self.packs = Packs(self.dir)

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def read(self, key: str) -> dict | None:
        """The record of ``key``; None when missing. A damaged record (not valid
        JSON, another point's, another schema's, a section or type missing) is
        moved aside to records/damaged/ and reported."""
        path = self.path(key)
        try:
            rec = read_json(path)
        except FileNotFoundError:
            return self._packed(key)
        except DamagedFile as exc:
            rec, problem = None, str(exc)
        except OSError as exc:
            rec, problem = None, f"cannot read it ({exc.strerror or exc})"
        else:
            problem = record_problem(key, rec, self.data_id)
        if problem is not None:
            self._move_aside(path, problem)
            return None
        return upgraded(rec)

    def _packed(self, key: str) -> dict | None:
        """The packed record of ``key`` (None: none, or a damaged line, reported: its point is
        computed again and its single record then overrides the line)."""
        raw = self.packs.raw(key)
        if raw is None:
            return None
        try:
            rec = json.loads(raw)
        except (ValueError, RecursionError):
            problem = "not JSON"
        else:
            problem = record_problem(key, rec, self.data_id)
        if problem is not None:
            self.damaged.append(f"{key} in a pack ({problem})")
            return None
        return upgraded(rec)

    def keys(self) -> set[str]:
        """The keys with a record, single or packed."""
        return {p.stem for p in self.dir.glob("*.json")} | self.packs.keys()

    def pack(self, merge: bool = False) -> Path | None:
        """Pack the single records once there are :data:`.packs.PACK_AT` of them; ``merge``:
        every pack and single record into one pack, if there is a pack (the end of a sweep)."""
        return packing.pack_loose(self.dir, self.packs, self.read, packing.PACK_AT, merge)

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
        return {k for k in self.keys() if (self.read(k) or {}).get("status") == "ok"}

    def write(self, key: str, record: dict) -> None:
        """Atomically; without fsync (a record lost to an OS crash is detected
        as missing or damaged on the next run and recomputed). A failure of the
        file system raises :class:`attnsim.results.WriteError` naming the file."""
        text = json.dumps(record, sort_keys=True)
        atomic_write(self.path(key), lambda fh: fh.write(text.encode()), durable=False)

    def records(self, keys: list[str] | None = None) -> list[dict]:
        """Records of ``keys`` (all records when None), in that order; missing ones skipped."""
        if keys is None:
            keys = sorted(self.keys())
        return [r for r in (self.read(k) for k in keys) if r is not None]

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold the lock of one record. While another process holds it, says so
        once on stderr (naming the record and the holder's pid), then waits."""
        path = self.dir / f"{key}.lock"
        left = path.exists()  # held now, or left by a killed worker (with its temporary record, maybe)
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as exc:
            raise WriteError(f"{path}: cannot create the record's lock ({exc.strerror})") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid, _, thread = os.pread(fd, 200, 0).decode(errors="replace").strip().partition(" ")
                who = (
                    f"another thread of this process ({thread or 'unnamed'})"
                    if pid == str(os.getpid())
                    else f"another process (pid {pid or 'unknown'})"
                )
                msg = f"attnsim: waiting for {path}: {who} is computing this point"
                print(msg, file=sys.stderr, flush=True)
                fcntl.flock(fd, fcntl.LOCK_EX)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()} {threading.current_thread().name}".encode(), 0)
            if left:  # a writer killed mid-record (SIGKILL) leaves its lock file and its temporary;
                self._drop_temporaries(key)  # looked for only then: a glob reads the whole folder
            yield
        finally:
            _remove_lock(fd, path)  # after the record is written: a waiter then finds it done

    def drop_stale_lock(self, key: str) -> None:
        """Remove the lock file of a point whose worker was stopped mid-point, unless a live
        process holds it (a lock dies with its process; its file stays when the worker was
        killed, or stopped between creating the file and holding it), and the temporary
        record file a worker killed while writing it left (nobody else writes that point)."""
        path = self.dir / f"{key}.lock"
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return
        self._drop_temporaries(key)
        _remove_lock(fd, path)

    def _drop_temporaries(self, key: str) -> None:
        """The temporary record files of ``key`` (atomic_write's names), left by a writer killed
        mid-write; called only while holding the point's lock, so nobody else is writing one."""
        for tmp in self.dir.glob(f".{key}.json.*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    @contextlib.contextmanager
    def computing(self, grid: str) -> Iterator[None]:
        """Held while a sweep of grid ``grid`` (its description's hash) computes in this folder:
        a ConfigError at once while a sweep of another grid computes here (the two would
        rotate sweep.json and rewrite records.csv under each other); sweeps of one grid
        share the folder. The claim is a lock file per grid, checked and taken under a lock
        of the folder itself, and removed by the last sweep of its grid to leave."""
        mine = self.root / f".computing.{grid}.lock"
        with folder_locked(self.root):
            for other in self.root.glob(".computing.*.lock"):
                if other != mine and _held(other):
                    raise ConfigError(
                        f"{self.root}: a sweep of another grid is computing there now (a sweep file with the "
                        "same name); wait for it to end, or set another [sweep] name"
                    )
            try:
                fd = os.open(mine, os.O_CREAT | os.O_RDWR, 0o644)
            except OSError as exc:
                raise WriteError(f"{mine}: cannot create the sweep's lock ({exc.strerror})") from None
            fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            yield
        finally:
            with folder_locked(self.root):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the last of its grid here
                except BlockingIOError:
                    os.close(fd)
                else:
                    _remove_lock(fd, mine)

    def compute(self, task: Task, run: Callable[..., dict]) -> bool:
        """Compute (``run(config, save, data)`` gives the record) and write one record
        unless it is done (maybe by another sweep in the same folder); True when it
        was computed here."""
        with self.lock(task.key):
            rec = self.read(task.key)
            if rec is not None and rec.get("status") == "ok":
                return False
            self.write(task.key, stamped(task, run(task.config, task.save, task.data)))
            return True


def _held(path: Path) -> bool:
    """Whether a live process holds the lock file ``path``; a stale one is removed."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return True
    _remove_lock(fd, path)
    return False


def _remove_lock(fd: int, path: Path) -> None:
    """Remove a held lock's file, then release and close it (a waiter then finds its own)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def stamped(task: Task, rec: dict) -> dict:
    """A point's record with what :func:`record_problem` verifies it by: its key
    (a record copied over another point's file is then recognized) and, with
    data, the point and data its key is of (its config is what the data decided)."""
    rec["key"] = task.key
    if task.data is not None:
        rec["point"], rec["data_id"] = task.config, task.data_id
    return rec


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
    _since_pack: int = field(default=0, repr=False)

    def records(self) -> list[dict]:
        """The sweep's records in grid order (as read when it ended; missing ones skipped)."""
        if self.final is None:
            return self.store.records(self.keys)
        return [r for r in (self.final.get(k) for k in self.keys) if r is not None]

    @property
    def root(self) -> Path:
        return self.store.root

    def finished(self, key: str, computed: bool, bar: Any) -> None:
        """A point's record was written (``computed``: by this sweep): read it now,
        while the sweep is otherwise waiting, rather than all records at the end."""
        self.computed += computed
        self.final[key] = self.store.read(key)
        bar.update(1)
        self._since_pack += 1
        if self._since_pack >= packing.PACK_AT:  # a long sweep packs as it goes (the check lists the folder)
            self._since_pack = 0
            self.store.pack()


def load_records(root: str | Path) -> list[dict]:
    return Store(Path(root)).records()
