"""The files attnsim writes and reads, safely: atomic writes (a temp file and a rename, fsynced),
output folders checked before any work and locked while a run writes into them, a run's own
files told from others', and guarded reads of JSON and npz files (regular files of bounded size,
damaged ones named). :mod:`attnsim.results` re-exports these."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import shutil
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

if TYPE_CHECKING:  # names in annotations only
    from matplotlib.figure import Figure


LOCK_NAME = ".attnsim.lock"  # held while a run writes into its folder
RUN_FILES = ("result.json", "trajectory.npz", "trajectory.csv", "*.png", "*.pdf", "*.svg")  # a run's files


def _seed_runs(folder: Path) -> list[Path]:
    """The ``seed-K`` folders of an ``attnsim run --seeds`` folder that hold a run's files only."""
    return [
        p
        for p in sorted(folder.glob("seed-*"))
        if p.is_dir()
        and not p.is_symlink()
        and p.name[5:].isdigit()
        and {q.name for q in p.iterdir() if q.name != LOCK_NAME} <= {q.name for q in run_files(p)}
    ]


def run_files(folder: Path) -> list[Path]:
    """The files of a run in ``folder``: its results and the figures drawn from them."""
    return sorted({p for pattern in RUN_FILES for p in folder.glob(pattern)})


def check_run_folder(
    folder: str | Path, force: bool = False, what: str = "--out", flag: str = "--force"
) -> None:
    """OutputError unless ``folder`` can take a run: missing or empty, or (with
    ``force``) holding a run to replace; never a sweep's folder."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    if (folder / "sweep.json").exists() or (folder / "records").is_dir():
        raise OutputError(f"{what}: {folder} is a sweep's folder; a run writes into a folder of its own")
    held = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    if not held:
        return
    if not force:
        shown = ", ".join(held[:4]) + (", ..." if len(held) > 4 else "")
        raise OutputError(
            f"{what}: {folder} already holds {shown}; a run writes into an empty folder "
            f"({flag} replaces the run there)"
        )
    others = sorted(set(held) - {p.name for p in run_files(folder)} - {p.name for p in _seed_runs(folder)})
    if others:
        raise OutputError(
            f"{what}: {folder} holds files that are not a run's ({', '.join(others[:4])}); {flag} replaces "
            "what attnsim wrote (a run, or the runs of --seeds) only"
        )


def remove_runs(folder: Path) -> None:
    """Remove the run files and the ``--seeds`` runs :func:`check_run_folder` let ``--force`` replace."""
    for old in run_files(folder):
        old.unlink(missing_ok=True)
    for sub in _seed_runs(folder):
        shutil.rmtree(sub)


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s lock (another process writing into it: OutputError naming its pid)."""
    path = folder / LOCK_NAME
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError as exc:
        raise WriteError(f"{folder}: cannot write in the folder ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise OutputError(f"--out: {folder}: another run (pid {holder}) is writing into it") from None
        with contextlib.suppress(OSError):  # the pid is for the message only (a full disk refuses it)
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        try:
            yield
        finally:  # the work is done: the lock file goes while still held (no stale lock left behind)
            with contextlib.suppress(OSError):
                os.unlink(path)
    finally:
        os.close(fd)


def json_safe(obj: Any) -> Any:
    """JSON-safe copy: NaN and inf become null, NumPy scalars Python numbers."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it; restored at once
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # what open() would give a new file (read at import, before any threads)


class WriteError(Exception):
    """A result that could not be written (full disk, read-only mount, no
    permission): the run or sweep fails with one line naming the file."""


def atomic_write(path: Path, write: Callable[[BinaryIO], object], durable: bool = True) -> None:
    """Write through a temporary file in the same folder, then rename; the file
    gets the mode open() would give it (temporary files are created 0600).
    ``durable``: fsync before the rename, so the file survives an OS crash too
    (a killed process never leaves a partial file either way). A failure of the
    file system raises :class:`WriteError` naming ``path``; nothing is left."""
    path = Path(path)
    tmp = None
    try:
        while tmp is None:  # named before it exists (mkstemp names it after: a signal unwinding
            # the process between the two, as when a sweep worker is stopped, left a file nobody knew)
            tmp = path.parent / f".{path.name}.{os.urandom(8).hex()}.tmp"
            with contextlib.suppress(FileExistsError):  # else another writer's (one chance in 2**64)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                break
            tmp = None
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fchmod(fh.fileno(), FILE_MODE)
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, WriteError):
            raise WriteError(f"{path}: cannot write ({_why(exc)})") from None
        raise


def save_png(fig: Figure, path: str | Path, dpi: int = 110, fmt: str = "png") -> Path:
    """A matplotlib figure as a PNG (or ``fmt``), its empty margins trimmed, written atomically (its
    folder created), then closed."""
    import matplotlib.pyplot as plt  # lazy: matplotlib is imported only by what draws

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"{path.parent}: cannot create the folder ({exc.strerror})") from None
    atomic_write(path, lambda fh: fig.savefig(fh, format=fmt, dpi=dpi, bbox_inches="tight", pad_inches=0.08))
    plt.close(fig)
    return path


def _why(exc: OSError) -> str:
    """The reason of a failed write in words (numpy's writers wrap OSErrors in ValueErrors, not these)."""
    if exc.errno == errno.EFBIG:
        return "file too large for the limits of this process or file system"
    return exc.strerror or str(exc)


class OutputError(ValueError):
    """An output folder that cannot be created or written."""


NAME_MAX = 255
PATH_MAX = 4096  # Linux's limit of a path's bytes, its final NUL included
PATH_ROOM = 96  # the longest path attnsim writes below an output folder (seed-K/, records/damaged/...)


def check_output_dir(path: str | Path, what: str = "--out") -> Path:
    """Check, before any work is done, that results can be written into the
    folder ``path`` (created later if missing): not empty and not the root
    folder; every existing part of it a folder (a symlink that loops or points
    nowhere is refused); names fit the file system; and its nearest existing
    ancestor accepts a new file (probed, so it also holds for root and
    read-only mounts). Raises OutputError with one line naming the folder."""
    text = os.fspath(path)
    if not text:
        raise OutputError(f"{what}: an empty path; name a folder")
    p = Path(text)
    for part in p.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise OutputError(f"{what}: {path}: the name {part[:20]}... is longer than {NAME_MAX} bytes")
    absolute = Path(os.path.abspath(text))
    size = len(os.fsencode(absolute))
    if size + PATH_ROOM >= PATH_MAX:
        raise OutputError(
            f"{what}: {text[:40]}...: a path of {size} bytes; the files written in it would pass the "
            f"system's limit of {PATH_MAX} bytes a path (a finished run could not be saved); use a "
            "shorter path"
        )
    if absolute == Path(absolute.anchor):
        raise OutputError(f"{what}: {path} is the root folder; name a folder for the results")
    base = Path(absolute.anchor)
    for part in absolute.parts[1:]:
        here = base / part
        if os.path.islink(here):
            _follow(here, path, what)
        elif not os.path.lexists(here):
            break  # this part and the rest are created
        if not here.is_dir():
            if here == absolute:
                kind = ": it is a file" if here.is_file() else ""
                raise OutputError(f"{what}: {path} exists and is not a folder{kind}")
            raise OutputError(f"{what}: {path}: {here} is a file, not a folder")
        base = here
    try:
        fd, probe = tempfile.mkstemp(dir=base, prefix=".attnsim-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{what}: {path}: cannot write in {base} ({exc.strerror})") from None
    return p


def _follow(link: Path, path, what: str) -> None:
    """Refuse a symlink on the way to an output folder that loops or dangles."""
    try:
        link.resolve(strict=True)
    except RuntimeError:  # Python < 3.13 reports a loop so
        raise OutputError(f"{what}: {path}: {link} is a symlink loop") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputError(f"{what}: {path}: {link} is a symlink loop") from None
        target = os.readlink(link)
        raise OutputError(f"{what}: {path}: {link} is a dangling symlink (to {target})") from None


def write_csv_table(path: str | Path, columns: list[str], rows, lineterminator: str = "\n") -> Path:
    """Rows (mappings of ``columns``) as CSV under a header row, written atomically."""
    import csv  # lazy: tables are written rarely
    import io  # lazy: as csv

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator=lineterminator)
    writer.writeheader()
    writer.writerows(rows)
    path = Path(path)
    atomic_write(path, lambda fh: fh.write(buf.getvalue().encode()))
    return path


class ResultError(ValueError):
    """A run folder that does not hold a readable result (missing, truncated, not attnsim's)."""


MAX_JSON_BYTES = 256 * 2**20  # result.json and a record are kB (MB with saved arrays)


class DamagedFile(ValueError):
    """A file attnsim wrote that cannot be read back as written (the message says why)."""


def _open_regular(path: Path, max_bytes: float) -> BinaryIO:
    """``path`` opened for reading if it is a regular file of at most ``max_bytes``
    (FileNotFoundError if missing; DamagedFile for a pipe, a device, a folder or a file too
    large: a reader would hang on a pipe or read /dev/zero until memory runs out)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a pipe without a writer: no hang at open
    fh = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        fh.close()
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a device, pipe or socket"
        raise DamagedFile(f"not a regular file ({kind})")
    if st.st_size > max_bytes:
        fh.close()
        raise DamagedFile(f"{st.st_size / 2**20:.0f} MB, larger than any file attnsim writes there")
    return fh


def read_json(path: Path, max_bytes: float = MAX_JSON_BYTES) -> Any:
    """A JSON file attnsim wrote: FileNotFoundError if missing, DamagedFile (one line
    saying why) if it is not a regular file, too large, not UTF-8 JSON or nested past
    what Python parses; OSError for a read error."""
    with _open_regular(path, max_bytes) as fh:
        raw = fh.read(int(max_bytes) + 1)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedFile(f"not JSON: {exc}") from None
    except RecursionError:
        raise DamagedFile("not JSON attnsim wrote: nested too deeply") from None


def read_npz(path: Path, wanted: Callable[[str], bool] | None = None) -> dict[str, np.ndarray]:
    """The arrays of an .npz attnsim wrote (only those whose names ``wanted`` accepts):
    each member's header is checked against the bytes it holds before anything is
    allocated, and a damaged member (a bad CRC, corrupt compression, a header declaring
    more than the member holds, a pickle) is a DamagedFile naming it."""
    out = {}
    with _open_regular(path, math.inf) as fh:
        try:
            zf = zipfile.ZipFile(fh)
        except (zipfile.BadZipFile, EOFError, ValueError) as exc:
            raise DamagedFile(f"not an .npz file ({type(exc).__name__})") from None
        with zf:
            for info in zf.infolist():
                name = info.filename.removesuffix(".npy")
                if (
                    not name.isprintable() or not name.isascii()
                ):  # a damaged directory: no raw bytes in a message
                    raise DamagedFile("its table of members is damaged (a name that is not text)")
                if wanted is None or wanted(name):
                    out[name] = _member(zf, info, name)
    return out


def _member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, name: str) -> np.ndarray:
    fmt = np.lib.format
    try:
        with zf.open(info) as fh:
            version = fmt.read_magic(fh)
            header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, _, dtype = header(fh)
            if dtype.hasobject:
                raise DamagedFile(f"member {name!r} holds Python objects, not numbers")
            declared = math.prod(shape) * dtype.itemsize
            if declared > info.file_size:
                raise DamagedFile(f"member {name!r} declares {declared:.3g} bytes and holds {info.file_size}")
        with zf.open(info) as fh:
            return fmt.read_array(fh, allow_pickle=False)
    except DamagedFile:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError) as exc:
        raise DamagedFile(f"member {name!r} is damaged ({type(exc).__name__})") from None
