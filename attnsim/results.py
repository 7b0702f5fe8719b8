"""Run results: the Result object, atomic save and load, provenance."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import registry
from ._meta import __version__
from .runtime.threads import threads
from .storage import (  # noqa: F401  (part of this module's interface)
    FILE_MODE,
    LOCK_NAME,
    MAX_JSON_BYTES,
    NAME_MAX,
    PATH_MAX,
    PATH_ROOM,
    RUN_FILES,
    DamagedFile,
    OutputError,
    ResultError,
    WriteError,
    _follow,
    _member,
    _open_regular,
    _seed_runs,
    _umask,
    _why,
    atomic_write,
    check_output_dir,
    check_run_folder,
    folder_lock,
    json_safe,
    read_json,
    read_npz,
    remove_runs,
    run_files,
    save_png,
    write_csv_table,
)

if TYPE_CHECKING:  # names in annotations only
    pass

SCHEMA_VERSION = 6  # 2: regimes from counts; 3: refined times, the limit section, new config keys;
# 4: the population error from importance sampling, with pop_error_resolved; 5: regimes against the
# Bayes error (bayes_error, excess_error over it, label_noise_cost over the clean-label twin);
# 6: the measured event times in final (t_memorize, t_select, which was theory's t_generalize,
# t_pop_loss_settled, times_refined), no longer under theory
UPGRADED = (5,)  # the schemas read upgraded (:func:`upgraded`): their numbers mean what 6's do

# schema 5's measured times, under theory there: their names in final now
_MOVED_TIMES = {
    "t_memorize": "t_memorize",
    "t_generalize": "t_select",
    "t_pop_loss_settled": "t_pop_loss_settled",
    "times_refined": "times_refined",
}


def upgraded(meta: dict) -> dict:
    """A result or sweep record of an earlier schema with this schema's names: schema 5's (and
    earlier) measured times moved from ``theory`` to ``final`` (t_generalize as t_select), the
    precision twin's t_generalize as t_select. A record of this schema is returned as it is."""
    version = meta.get("schema_version", 0)
    if not isinstance(version, int) or version >= 6:
        return meta
    meta = dict(meta)
    theory = dict(meta.get("theory") or {})
    final = dict(meta.get("final") or {})
    for old, new in _MOVED_TIMES.items():
        if old in theory:
            final.setdefault(new, theory.pop(old))
    if isinstance(meta.get("precision"), dict) and "t_generalize" in meta["precision"]:
        precision = dict(meta["precision"])
        precision["t_select"] = precision.pop("t_generalize")
        meta["precision"] = precision
    if meta.get("theory") is not None:
        meta["theory"] = theory
    if meta.get("final") is not None:
        meta["final"] = final
    meta["schema_version"] = SCHEMA_VERSION
    return meta


@dataclass
class Result:
    """One run: its configuration, trajectory arrays, final metrics and theory."""

    config: dict[str, Any]
    trajectory: dict[str, np.ndarray]
    final: dict[str, Any]
    theory: dict[str, Any]
    engine: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    threads: dict[str, Any] = field(default_factory=dict)  # thread settings (bit-identity holds per setting)
    git: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0  # the simulation: setup_s, then the steps, metrics and theory
    setup_s: float = 0.0  # building the problem (data, W(0) and its projections)
    evaluation_s: float = 0.0  # CPU time of its evaluations (population metrics, test sets; twins' too)
    startup_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    limit: dict[str, Any] | None = None  # the max-margin limit (config limit = true)
    precision: dict[str, Any] | None = None  # the precision twin (config precision_twin)
    schema_version: int = SCHEMA_VERSION
    path: Path | None = None
    problem: Any = field(default=None, repr=False)  # engine Problem (not saved)
    state: dict | None = field(default=None, repr=False)  # final engine-coordinate W, p, nu (not saved)

    def __repr__(self) -> str:
        """One line: the model, its size, the run's outcome (the arrays are in ``trajectory``)."""
        c, f = self.config, self.final
        size = ", ".join(f"{k}={c[k]}" for k in ("n", "T", "d", "steps") if k in c)
        headline = ("regime", "pop_error", "gen_error", "risk", "e_icl", "population_loss")
        shown = [k for k in headline if k in f]
        outcome = ", ".join(f"{k}={f[k]:.4g}" if isinstance(f[k], float) else f"{k}={f[k]}" for k in shown)
        where = f", path={str(self.path)!r}" if self.path is not None else ""
        points = len(self.trajectory.get("step", ()))
        return f"Result(model={c.get('model', 'attention')}, {size}: {outcome}; {points} log points{where})"

    def to_json(self) -> dict[str, Any]:
        return json_safe(
            {
                "schema_version": self.schema_version,
                "config": self.config,
                "engine": self.engine,
                "data": self.data,
                "final": self.final,
                "theory": self.theory,
                **({"limit": self.limit} if self.limit is not None else {}),
                **({"precision": self.precision} if self.precision is not None else {}),
                "warnings": self.warnings,
                "versions": self.versions,
                "threads": self.threads,
                "git": self.git,
                "elapsed_s": self.elapsed_s,
                "setup_s": self.setup_s,
                "evaluation_s": self.evaluation_s,
                "startup_s": self.startup_s,
            }
        )

    def to_csv(self, path: str | Path) -> Path:
        """The logged arrays with one value per log point as CSV (a header row, then one
        row per log point; per-sample and per-token arrays are left to trajectory.npz),
        written atomically."""
        steps = np.asarray(self.trajectory["step"])
        cols = [k for k, v in self.trajectory.items() if np.ndim(v) == 1 and len(v) == steps.size]
        rows = (
            {k: "" if np.isnan(x) else repr(x) for k in cols for x in [float(self.trajectory[k][i])]}
            for i in range(steps.size)
        )
        return write_csv_table(path, cols, rows)

    def save(self, outdir: str | Path, force: bool = False) -> Path:
        """Write result.json and trajectory.npz into ``outdir`` atomically, under the
        folder's lock; on a failed write (a full disk, a read-only mount) nothing of
        this save is left behind and :class:`WriteError` names the file. A folder
        that holds a run already is refused (:func:`check_run_folder`) unless
        ``force``, which first removes that run's files (no stale figure stays)."""
        outdir = Path(outdir)
        created = not outdir.exists()
        written: list[Path] = []
        try:
            outdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WriteError(f"{outdir}: cannot create the folder ({exc.strerror})") from None
        # what this save wrote is removed under its lock only: a save that could not take
        # the lock (another run is writing) must not take that run's folder away
        with folder_lock(outdir):
            try:
                check_run_folder(outdir, force, what="save", flag="force=True")
                if force:
                    remove_runs(outdir)
                self._write(outdir, written)
            except BaseException:
                for path in written:
                    path.unlink(missing_ok=True)
                if created:
                    with contextlib.suppress(OSError):
                        (outdir / LOCK_NAME).unlink()
                        outdir.rmdir()
                raise
        self.path = outdir
        return outdir

    def _write(self, outdir: Path, written: list[Path]) -> None:
        atomic_write(outdir / "trajectory.npz", lambda fh: np.savez_compressed(fh, **self.trajectory))
        written.append(outdir / "trajectory.npz")
        text = json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n"
        atomic_write(outdir / "result.json", lambda fh: fh.write(text.encode()))
        written.append(outdir / "result.json")


def load(outdir: str | Path, arrays: Callable[[str], bool] | None = None) -> Result:
    """Read a result written by :meth:`Result.save` (ResultError if the folder does not hold
    one); ``arrays``: which trajectory arrays to read, by name (default: all)."""
    outdir = Path(outdir)
    meta = _read_meta(outdir / "result.json")
    path = outdir / "trajectory.npz"
    try:
        traj = read_npz(path, None if arrays is None else lambda k: k == "step" or arrays(k))
    except FileNotFoundError:
        raise ResultError(f"{path}: missing (the run's logged arrays); rerun the run") from None
    except DamagedFile as exc:
        raise ResultError(f"{path}: damaged ({exc}); rerun the run") from None
    except OSError as exc:
        raise ResultError(f"{path}: cannot read it ({_why(exc)})") from None
    if "step" not in traj:
        raise ResultError(f"{path}: not an attnsim trajectory (no 'step' array); rerun the run")
    nan = float("nan")
    final = {
        k: (nan if v is None and k.startswith(("pop_", "test_", "score_")) else v)
        for k, v in meta["final"].items()
    }
    for old, new in _renamed(meta["config"].get("model")).items():  # a metric's earlier name, in older files
        if old in final and new not in final:
            final[new] = final.pop(old)
            if old in traj:
                traj[new] = traj.pop(old)
    return Result(
        config=meta["config"],
        trajectory=traj,
        final=final,
        theory=meta["theory"],
        engine=meta.get("engine", {}),
        versions=meta.get("versions", {}),
        threads=meta.get("threads", {}),
        git=meta.get("git") or {},
        elapsed_s=meta.get("elapsed_s", 0.0),
        setup_s=meta.get("setup_s", 0.0),
        evaluation_s=meta.get("evaluation_s", 0.0),
        startup_s=meta.get("startup_s", 0.0),
        warnings=meta.get("warnings", []),
        data=meta.get("data", {}),
        limit=meta.get("limit"),
        precision=meta.get("precision"),
        schema_version=meta.get("schema_version", 0),
        path=outdir,
    )


def _renamed(model: Any) -> dict[str, str]:
    """A model's metrics' earlier names (old -> new) from its registry line (none for an unknown model)."""
    entry = registry.MODELS.get(model) if isinstance(model, str) else None
    return {} if entry is None else entry.renamed


def _read_meta(path: Path) -> dict:
    """result.json as a mapping with the sections every reader needs."""
    try:
        meta = read_json(path)
    except FileNotFoundError:
        raise ResultError(f"{path}: missing; not a run folder") from None
    except DamagedFile as exc:
        raise ResultError(f"{path}: damaged ({exc}); rerun the run") from None
    except OSError as exc:
        raise ResultError(f"{path}: cannot read it ({_why(exc)})") from None
    if not isinstance(meta, dict):
        raise ResultError(f"{path}: not an attnsim result (a JSON {type(meta).__name__}, not an object)")
    missing = [k for k in ("config", "final", "theory") if not isinstance(meta.get(k), dict)]
    if missing:
        raise ResultError(f"{path}: not an attnsim result (no {', '.join(missing)} section); rerun the run")
    version = meta.get("schema_version", 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ResultError(
            f"{path}: damaged (schema_version {version!r} is not a version number); rerun the run"
        )
    if version > SCHEMA_VERSION:
        raise ResultError(
            f"{path}: written by a newer attnsim (result schema {version}; this one reads up to "
            f"{SCHEMA_VERSION}); upgrade attnsim to read it"
        )
    return upgraded(meta)


def versions() -> dict[str, str]:
    """Package versions for result files (a fresh copy of a per-process value)."""
    return dict(_versions())


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str]:
    import numba  # lazy: reading results (attnsim plot, attnsim.load) needs no Numba or SciPy
    import scipy  # lazy: as numba

    return {"attnsim": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "numba": numba.__version__}  # fmt: skip


THREAD_VARIABLES = ("NUMBA_NUM_THREADS", "NUMBA_THREADING_LAYER", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                    "MKL_NUM_THREADS")  # fmt: skip


def thread_settings() -> dict[str, Any]:
    """The settings results depend on bit for bit (SPEC §10): the thread
    variables as set (null: unset), Numba's thread count and layer, and the
    two-way splits of attnsim's NumPy work :func:`attnsim.runtime.threads.threads`)."""
    import numba  # lazy: as in _versions

    layer = None
    with contextlib.suppress(ValueError):  # no parallel kernel has run yet in this process
        layer = numba.threading_layer()
    return {
        "env": {k: os.environ.get(k) for k in THREAD_VARIABLES},
        "numba_threads": numba.get_num_threads(),
        "numba_layer": layer,
        "attnsim_split": threads(),
    }


def file_hash(path: str | Path) -> str:
    """SHA-256 of a file, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def git_revision() -> dict[str, Any]:
    """Which source attnsim runs from: the git checkout it runs in (revision
    and uncommitted changes), else the revision recorded when the installed
    package was built (``attnsim/_revision.py``), else why it is unknown."""
    here = Path(__file__).resolve().parent.parent
    if (here / ".git").exists():

        def git(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run(["git", "-C", str(here), *args], capture_output=True, text=True, timeout=5)

        try:
            rev, dirty = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
            if rev.returncode == 0:
                return {
                    "revision": rev.stdout.strip(),
                    "dirty": bool(dirty.stdout.strip()),
                    "source": "checkout",
                }
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        from . import _revision  # optional: written only when the package is built (attnsim/_build.py)
    except ImportError:
        return {"revision": None, "reason": "installed from a source without git metadata"}
    return {
        "revision": _revision.REVISION,
        "dirty": _revision.DIRTY,
        "source": "recorded when the package was built",
    }


def free_sibling(outdir: Path) -> Path:
    """The first of DIR-2, DIR-3, ... that does not exist."""
    k = 2
    while Path(f"{outdir}-{k}").exists():
        k += 1
    return Path(f"{outdir}-{k}")
