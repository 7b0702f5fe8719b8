"""One run end to end: data -> engine -> dynamics -> metrics -> Result."""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import qmc
from threadpoolctl import ThreadpoolController

from . import kernels, metrics, results, theory
from .config import Config, as_config
from .data import Dataset, config_for_data, generate, load_npz, make_streams
from .dynamics import make_population, run_flow, run_gd
from .engines import build, build_implicit, check_resources, choose_engine

_compiled = False
BLAS_THREADS_FROM_D = 6000  # setups at this d and above use every BLAS thread


@functools.lru_cache(maxsize=1)
def _blas() -> ThreadpoolController:
    """One controller per process: finding the BLAS libraries scans /proc (ms)."""
    return ThreadpoolController()


def ensure_compiled() -> float:
    """Compile or load the kernels once per process; seconds spent."""
    global _compiled
    if _compiled:
        return 0.0
    t = time.perf_counter()
    kernels.warmup()
    qmc.Sobol(d=2, scramble=False)  # loads scipy's direction numbers once
    _compiled = True
    return time.perf_counter() - t


def simulate(
    config: Config | Mapping[str, Any] | None = None,
    data: str | Path | Dataset | None = None,
    *,
    save_scores: bool = False,
    progress: bool | None = False,
) -> results.Result:
    """Simulate one training run.

    Parameters
    ----------
    config : a :class:`Config` or a mapping of config keys (defaults for the rest).
    data : optional ``.npz`` path (or Dataset) with user-supplied arrays; n, T, d
        then come from the arrays.
    save_scores : keep every sample's token scores at every log point.
    progress : show a progress bar for long runs (None: only on a terminal).
    """
    from . import IMPORT_S

    startup = ensure_compiled()
    cfg = as_config(config)
    t0 = time.perf_counter()
    streams = make_streams(cfg.seed)
    if data is not None:
        ds = data if isinstance(data, Dataset) else load_npz(data, cfg)
        cfg = config_for_data(cfg, ds)
    engine, reason = choose_engine(cfg, user_data=data is not None)
    check_resources(cfg, engine, save_scores)
    # Multithreaded BLAS pays off only for the d^2 k setup products at large d;
    # elsewhere its threads keep spinning after each call and slow Numba's.
    setup_threads = None if engine != "implicit" and cfg.d >= BLAS_THREADS_FROM_D else 1
    with _blas().limit(limits=setup_threads, user_api="blas"):
        if engine == "implicit":
            problem, ds = build_implicit(cfg, streams, reason)
        else:
            if data is None:
                ds = generate(cfg, streams)
            problem = build(cfg, ds, streams, engine, reason)
    pop = make_population(cfg, ds, streams.population)
    # the step loop and metrics use small matrices: one BLAS thread
    with _blas().limit(limits=1, user_api="blas"):
        driver = run_gd if cfg.integrator == "gd" else run_flow
        traj = driver(problem, ds, cfg, pop, save_scores=save_scores, progress=progress)
    arrays = traj.arrays
    arrays["fit_step"] = traj.fit_step
    arrays["y"], arrays["y_clean"] = ds.y, ds.y_clean
    if ds.roles is not None:
        arrays["roles"] = ds.roles
    final = metrics.final_metrics(arrays, ds.n_noisy, cfg.benign_error)
    elapsed = time.perf_counter() - t0
    res = results.Result(
        config=cfg.to_dict(),
        trajectory=arrays,
        final=final,
        theory=theory.summary(cfg, traj),
        engine={"used": problem.engine, "reason": problem.reason, **problem.info},
        versions=results.versions(),
        git=results.git_revision(),
        elapsed_s=elapsed,
        startup_s=IMPORT_S + startup,
        warnings=ds.warnings + traj.warnings,
        data={
            "source": ds.source,
            "n_noisy": ds.n_noisy,
            "noisy_index": np.flatnonzero(ds.noisy).tolist(),
            "population": ds.population_reason or "exact (SPEC §5)",
            "status": traj.status,
            "frozen_at": traj.frozen_at,
        },
    )
    # in-memory only (not saved): the engine problem and final state, for figures
    res.problem, res.state = problem, traj.state
    return res
