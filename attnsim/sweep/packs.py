"""A large sweep's records packed into a few files, and its table kept beside them.

Every point's record is first written alone (``records/<key>.json``, atomically, by the process
that computed it): a sweep killed at any moment loses nothing finished. A sweep of many points
would leave one file per point, so once ``PACK_AT`` of them have gathered the sweep's own process
copies them, verified, into a pack, ``records/pack-NNNNNN.jsonl`` (one line per record: its key,
a tab, its JSON), written atomically and synced to disk before the single files are removed; a
pack is never changed, only replaced. When the sweep ends, its packs and any single files left
are merged into one pack, and the sweep's table (what :func:`attnsim.sweep.load_sweep` returns,
column by column) is written beside it, ``pack-NNNNNN.table`` (JSON), valid while that pack is the
folder's only one, no single record has appeared since and the sweep file is the same.

A single record overrides a packed one of the same key (a failed point computed again); a packed
line that is damaged reads as missing and its point is computed again. Sweeps of fewer than
``PACK_AT`` points keep their single files (easy to read one by one).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import mmap
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from ..storage import atomic_write

PACK_AT = 1000  # single records that make a pack
PREFIX, SUFFIX, TABLE = "pack-", ".jsonl", ".table"  # the table: JSON, named apart from records


@contextlib.contextmanager
def folder_locked(folder: Path) -> Iterator[None]:
    """An exclusive lock of the folder itself (no file is left behind)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


class Packs:
    """The packs of one records folder: an index of key -> where its line is, read on demand
    (a key not found makes it look at the folder again: another process may have packed it)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._seen: tuple | None = None
        self._index: dict[str, tuple[int, int, int]] = {}  # key -> (pack, start, end) of its JSON
        self._maps: list[mmap.mmap | bytes] = []
        self._packs: dict[str, tuple] = {}  # each pack indexed once: name -> (its bytes, key -> (start, end))

    def files(self) -> list[Path]:
        try:
            names = sorted(n for n in os.listdir(self.folder) if n.startswith(PREFIX) and n.endswith(SUFFIX))
        except FileNotFoundError:
            return []
        return [self.folder / n for n in names]

    def refresh(self) -> None:
        """Index the packs again if the folder's packs changed (a pack never changes: only the
        new ones are read; the merged index is rebuilt)."""
        files = self.files()
        seen = tuple(p.name for p in files)
        if seen == self._seen:
            return
        for name in [n for n in self._packs if n not in seen]:  # merged away
            data = self._packs.pop(name)[0]
            if isinstance(data, mmap.mmap):
                data.close()
        for path in files:
            if path.name in self._packs:
                continue
            try:
                self._packs[path.name] = _indexed(path)
            except FileNotFoundError:  # replaced by a merge since it was listed: look again
                return self.refresh()
        index, maps = {}, []
        for i, name in enumerate(seen):
            data, keys = self._packs[name]
            maps.append(data)
            for key, (start, end) in keys.items():
                index[key] = (i, start, end)
        self._index, self._maps, self._seen = index, maps, seen

    def keys(self) -> set[str]:
        self.refresh()
        return set(self._index)

    def lines(self) -> dict[str, bytes]:
        """Every packed record's JSON text by key, in pack order (a later pack's line wins)."""
        self.refresh()
        order = sorted(self._index.items(), key=lambda item: item[1])
        return {key: self._maps[i][start:end] for key, (i, start, end) in order}

    def raw(self, key: str) -> bytes | None:
        """The JSON text of ``key``'s packed record (None: not packed)."""
        where = self._index.get(key)
        if where is None:
            self.refresh()
            where = self._index.get(key)
            if where is None:
                return None
        i, start, end = where
        return self._maps[i][start:end]

    def write(self, lines: dict[str, bytes], replaces: list[Path]) -> Path:
        """A new pack holding ``lines`` (key -> JSON text), synced to disk; then the packs it
        ``replaces`` are removed. Call with the folder locked."""
        numbers = [int(p.name[len(PREFIX) : -len(SUFFIX)]) for p in self.files()]
        path = self.folder / f"{PREFIX}{max(numbers, default=0) + 1:06d}{SUFFIX}"

        def write(fh) -> None:
            for key, text in lines.items():
                fh.write(key.encode("ascii") + b"\t" + text + b"\n")

        atomic_write(path, write, durable=True)
        for old in replaces:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()
            with contextlib.suppress(FileNotFoundError):
                table_path(old).unlink()
        self.refresh()
        return path

    def close(self) -> None:
        for data, _ in self._packs.values():
            if isinstance(data, mmap.mmap):
                data.close()
        self._packs, self._maps, self._index, self._seen = {}, [], {}, None


def _indexed(path: Path) -> tuple:
    """(a pack's bytes, mapped; key -> (start, end) of its JSON text)."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    keys = {}
    pos, n = 0, len(data)
    while pos < n:
        end = data.find(b"\n", pos)
        if end < 0:
            break  # a pack is written whole: a partial line is damage, and no record
        tab = data.find(b"\t", pos, end)
        if tab > pos:
            keys[data[pos:tab].decode("ascii", "replace")] = (tab + 1, end)
        pos = end + 1
    return data, keys


def table_path(pack: Path) -> Path:
    return pack.with_name(pack.name[: -len(SUFFIX)] + TABLE)


def pack_loose(
    folder: Path, packs: Packs, read: Callable[[str], dict | None], at_least: int, merge: bool
) -> Path | None:
    """Pack the folder's single records (``read`` verifies each, moving damaged ones aside) once
    there are ``at_least`` of them; ``merge``: every pack and single record into one pack (when
    there is more than one, or a single record beside a pack). Returns the new pack, if any."""
    with folder_locked(folder):
        loose = sorted(p for p in folder.glob("*.json"))
        old = packs.files()
        if len(loose) < at_least and not (merge and (len(old) > 1 or (old and loose))):
            return None
        lines: dict[str, bytes] = {}
        if merge:
            lines.update(packs.lines())
        taken = []
        for path in loose:
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            rec = read(path.stem)
            if rec is None:
                continue
            lines[path.stem] = json.dumps(rec, sort_keys=True).encode()
            taken.append((path, st))
        if not taken and not (merge and len(old) > 1):
            return None
        new = packs.write(lines, old if merge else [])
        for path, st in taken:  # unless it changed since it was read (a point computed again meanwhile)
            with contextlib.suppress(FileNotFoundError):
                now = path.stat()
                if (now.st_ino, now.st_mtime_ns, now.st_size) == (st.st_ino, st.st_mtime_ns, st.st_size):
                    path.unlink()
        return new


def write_table(pack: Path, spec_digest: str, held: dict, columns: dict[str, list]) -> None:
    """The sweep's table beside its only pack (see the module's docstring): what it holds
    (counts of points, records, failures) and its columns."""
    text = json.dumps({"spec": spec_digest, "held": held, "columns": columns})
    atomic_write(table_path(pack), lambda fh: fh.write(text.encode()), durable=False)


def read_table(folder: Path, spec_digest: str) -> tuple[dict, dict[str, list]] | None:
    """(what it holds, its columns): the table kept beside the folder's only pack, when it is
    still the sweep's (None: read the records)."""
    packs = Packs(folder).files()
    if len(packs) != 1 or any(folder.glob("*.json")):
        return None
    try:
        data = json.loads(table_path(packs[0]).read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("spec") != spec_digest:
        return None
    held, columns = data.get("held"), data.get("columns")
    if not isinstance(held, dict) or not isinstance(columns, dict):
        return None
    return held, columns
