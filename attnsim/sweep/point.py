"""The work of one point: its simulation, as a record (run by a worker, local or Dask)."""

from __future__ import annotations

import threading
import time
import warnings

from .. import registry
from ..config import Config, from_mapping
from ..results import SCHEMA_VERSION, json_safe
from ..runtime.workspace import Workspace


def setup_group(cfg: Config) -> tuple:
    """Points that share a setup (the model's ``setup_key``) run in one worker."""
    return (*registry.spec(cfg.model).setup_key(cfg), cfg.engine)


_THREAD = threading.local()  # .ws: the points' workspace of this thread


def point_workspace() -> Workspace:
    """The workspace of the calling thread's sweep points (one per thread, made on its first
    point, kept for its later ones): it keeps the draws of W(0)
    (:class:`attnsim.runtime.workspace.KeptDraws`: the sweep's points of the same seed and a
    smaller d read them instead of drawing them) and the exact run beside a precision twin
    (:class:`attnsim.runtime.workspace.KeptRun`: the next point of the same config with another
    twin format trains its twin alone). A thread of its own: two points computed at once on
    two threads of one process (a thread pool, a Dask worker's threads) share no kept draws,
    and the process's :data:`attnsim.runtime.workspace.WORKSPACE` is left as it was."""
    ws = getattr(_THREAD, "ws", None)
    if ws is None:
        ws = _THREAD.ws = Workspace()
        ws.kept_draws.enabled = ws.kept_run.enabled = True
    return ws


def run_point(cfg_dict: dict, save: list[str], data: str | None = None) -> dict:
    """Simulate one point, in this thread's :func:`point_workspace`, and return its record.
    Python warnings go into the record's "warnings" (the sweep's summary reports them
    once), not onto the worker's stderr."""
    from ..run import simulate  # lazy: a sweep's parent plans and stores without the kernels

    ws = point_workspace()
    t, cpu = time.perf_counter(), time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            # a Config, not the mapping: with data, warn only about keys set away from their defaults
            res = simulate(from_mapping(cfg_dict), data=data, workspace=ws)
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
        **({"precision": res.precision} if res.precision is not None else {}),
        "warnings": list(dict.fromkeys(res.warnings + _messages(caught))),
        **({"data": {"source": res.data["source"], "n_noisy": res.data["n_noisy"]}} if data else {}),
        "versions": res.versions,
        "threads": res.threads,
        "git": res.git,
        "elapsed_s": res.elapsed_s,
        "setup_s": res.setup_s,
        "evaluation_s": res.evaluation_s,
        "wall_s": time.perf_counter() - t,
        "cpu_s": time.process_time() - cpu,  # every thread of the worker, inside simulate
    }
    if save:
        rec["trajectory"] = {k: res.trajectory[k] for k in ["step", *save] if k in res.trajectory}
    return json_safe(rec)


def _messages(caught) -> list[str]:
    return list(dict.fromkeys(str(w.message) for w in caught))


def _failed_record(cfg_dict: dict, error: str, warned: list[str] | None = None) -> dict:
    rec = {"schema_version": SCHEMA_VERSION, "status": "failed", "config": cfg_dict, "error": error}
    return json_safe({**rec, "warnings": warned or []})
