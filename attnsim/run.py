"""One run end to end: data -> engine -> dynamics -> metrics -> Result."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from . import SimulationError, dynamics, metrics, results, theory
from .config import Config, as_config
from .data import Dataset, changed_keys, config_for_data, generate, make_streams
from .engines import build, check_resources, choose_engine, reserve_w0
from .kernels import state_q
from .population import HERMITE_NODES, Population, cached_population, expected_softplus, hermite_rule

_warm: set[str] = set()
POPULATION_METHOD = "importance sampling around the error's design points (README: 'Population metrics')"
BLAS_THREADS_FROM_D = 6000  # setups at this d and above use every BLAS thread


@functools.lru_cache(maxsize=1)
def _blas():
    """One controller per process: finding the BLAS libraries scans /proc (ms)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def ensure_compiled(integrator: str = "gd", announce=None) -> float:
    """Load (or compile, the first time ever) the kernels a run needs, and pay
    every other once-per-process cost (BLAS discovery, quadrature tables,
    first LAPACK calls) here rather than inside the simulation; seconds spent.
    ``announce()`` is called if this takes more than a second (compiling)."""
    if integrator in _warm:
        return 0.0
    import threading

    timer = threading.Timer(1.0, announce) if announce is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        return _warm_up(integrator)
    finally:
        if timer is not None:
            timer.cancel()


def _warm_up(integrator: str) -> float:
    t = time.perf_counter()
    if not _warm:
        # Kernels loaded from Numba's cache import SciPy's BLAS and LAPACK modules at
        # their first call, from C: a signal handled while that import runs Python
        # (Ctrl-C, SIGTERM) makes the lookup fail, and Numba then aborts the process
        # ("Fatal Python error: BLAS wrapper returned with an error"). Imported here,
        # a signal interrupts an ordinary import, and the kernels find them loaded.
        import scipy.linalg.cython_blas  # noqa: F401
        import scipy.linalg.cython_lapack  # noqa: F401

        from .kernels import attention

        attention.warmup()
        _blas()
        for _, nodes in HERMITE_NODES:
            hermite_rule(nodes)
        expected_softplus(np.zeros(3), np.array([0.1, 0.5, 2.0]))  # each rule's kernels
        simulate({"n": 4, "T": 4, "d": 12, "steps": 2, "pop_points": 16, "test_n": 2}, _warmup=True)
        _warm.add("gd")
    if integrator == "flow":
        simulate({"n": 4, "T": 4, "d": 12, "steps": 2, "pop_points": 16, "integrator": "flow"}, _warmup=True)
        _warm.add("flow")
    return time.perf_counter() - t


def make_population(cfg: Config, ds: Dataset, rng) -> Population | None:
    if ds.population_reason is not None or cfg.model == "encoder":
        return None
    roles = np.repeat(np.arange(4), ds.role_counts)
    rho = ds.rho if ds.rho is not None else cfg.rho
    return cached_population(cfg.seed, roles, rho, ds.sigma, cfg.pop_points, cfg.loss, rng)


def _file_identity(data) -> dict:
    """A data file's size and SHA-256, so a result can be traced to the exact bytes it ran on."""
    if not isinstance(data, (str, os.PathLike)) or not Path(data).is_file():
        return {}
    return {"file_bytes": Path(data).stat().st_size, "file_sha256": results.file_hash(data)}


def _check_data_file(cfg: Config, ds: Dataset) -> None:
    """What a data file can hold that no run can use: a zero head that is not
    trained (refused), labels of one class (a warning)."""
    from .data import DataError

    if ds.nu is not None and not np.any(ds.nu) and "nu" not in cfg.train_set:
        raise DataError(
            f"{ds.source}: nu is all zeros: the output is 0 for every input and no gradient reaches W or p; "
            "give a nonzero nu or train it (train = W,p,nu)"
        )
    if ds.y.size and np.all(ds.y == ds.y[0]):
        msg = (
            f"{ds.source}: every training label is {ds.y[0]:+g}: a single class (accuracy and the "
            "clean/noisy split say little)"
        )
        ds.warnings.append(msg)
        warnings.warn(msg, stacklevel=3)


def simulate(
    config: Config | Mapping[str, Any] | None = None,
    data: str | Path | Dataset | None = None,
    *,
    save_scores: bool = False,
    progress: bool | None = False,
    announce=None,
    _warmup: bool = False,
) -> results.Result:
    """Simulate one training run.

    Parameters
    ----------
    config : a :class:`Config` or a mapping of config keys (defaults for the rest).
    data : optional ``.npz`` path (or Dataset) with user-supplied arrays; n, T, d
        then come from the arrays.
    save_scores : keep every sample's token scores at every log point.
    progress : show a progress bar for long runs (None: only on a terminal).
    announce : called if loading the kernels takes more than a second (the first
        run on a machine compiles them); bad input is refused before that.
    """
    from . import IMPORT_S

    cfg = as_config(config)
    if data is not None and not isinstance(data, (str, os.PathLike, Dataset)):
        raise TypeError(
            f"data: expected a path to an .npz file, a built-in dataset name or a Dataset, "
            f"got {type(data).__name__}"
        )
    t0 = time.perf_counter()
    streams = make_streams(cfg.seed)
    if data is not None:
        from .realdata import Source, open_data  # real-data features: imported only with --data

        explicit = set(config) if isinstance(config, Mapping) else None
        opened = open_data(data)
        if isinstance(opened, Source):  # real data: one run of the protocol
            ds = opened.dataset(cfg, streams.data)
            keep = {"n", "noise_rate", "label_noise"} | ({"d"} if opened.builtin else set())
            explicit = (changed_keys(cfg) if explicit is None else explicit) - keep
        else:
            ds = opened
        cfg = config_for_data(cfg, ds, explicit=explicit)
        _check_data_file(cfg, ds)
    engine, reason = choose_engine(cfg, user_data=data is not None)
    check_resources(cfg, engine, save_scores)
    startup = 0.0 if _warmup else ensure_compiled(cfg.integrator, announce)
    if not _warmup and data is None and engine == "reduced" and cfg.model != "encoder":
        startup += reserve_w0(cfg.d)  # once per process, counted in start-up like the kernel loads
    # Multithreaded BLAS pays off only for the d^2 k setup products at large d;
    # elsewhere its threads keep spinning after each call and slow Numba's.
    setup_threads = None if engine != "implicit" and cfg.d >= BLAS_THREADS_FROM_D else 1
    with _blas().limit(limits=setup_threads, user_api="blas"):
        if cfg.model == "encoder":
            from .encoder import EncoderProblem

            if data is None:
                ds = generate(cfg, streams)
            problem = EncoderProblem(cfg, ds, streams, reason)
        else:
            problem, ds = build(cfg, ds if data is not None else None, streams, engine, reason)
    pop = make_population(cfg, ds, streams.population)
    setup = time.perf_counter() - t0 - startup
    rel = np.zeros(ds.y.size * problem.T) if ds.roles is None else (ds.roles == 0).astype(np.float64).ravel()
    watch = LimitWatch(problem) if cfg.limit else None
    # one BLAS thread in the step loop and the metrics: the attention model's
    # matrices are small, and the encoder's rank-n products are bound by memory
    # bandwidth (measured: 70 ms per step at d = mlp_dim = 2000 on one thread, 80-140 on two)
    twin: dict = {}
    meanwhile = (
        (lambda: twin.update(clean_twin(problem, ds, cfg, pop, rel)))
        if cfg.clean_twin and ds.n_noisy
        else None
    )
    with _blas().limit(limits=1, user_api="blas"):
        # the clean-label twin trains while the run's last population evaluations finish
        traj = dynamics.run(
            problem.stepper(cfg, rel), ds, cfg, problem.evaluator(cfg, pop), save_scores=save_scores,
            progress=progress, watch=watch, refine=cfg.integrator == "flow" or cfg.limit, meanwhile=meanwhile,
        )  # fmt: skip
        limit_section = watch.finish(cfg, traj, pop) if watch is not None else None
    arrays = traj.arrays
    arrays["fit_step"] = traj.fit_step
    arrays["y"], arrays["y_clean"] = ds.y, ds.y_clean
    if ds.roles is not None:
        arrays["roles"] = ds.roles
    final = metrics.final_metrics(arrays, ds.n_noisy, cfg.benign_error, twin or None)
    theory_section = theory.summary(cfg, traj, known_signal=ds.mu_pos is not None and ds.sigma is not None)
    if limit_section is not None:
        theory_section["gen_never"] = limit_section.get("gen_never")
    elapsed = time.perf_counter() - t0 - startup
    res = results.Result(
        config=cfg.to_dict(),
        trajectory=arrays,
        final=final,
        theory=theory_section,
        engine={"used": problem.engine, "reason": problem.reason, **problem.info},
        versions=results.versions(),
        threads=results.thread_settings(),
        git=dict(results.git_revision()),
        elapsed_s=elapsed,
        setup_s=setup,
        startup_s=IMPORT_S + startup,
        warnings=ds.warnings + traj.warnings,
        data={
            "source": ds.source,
            **_file_identity(data),
            "n_noisy": ds.n_noisy,
            "noisy_index": np.flatnonzero(ds.noisy).tolist(),
            "population": (
                "none for the encoder (no closed form): test metrics come from a finite test set of "
                f"{problem.info.get('test_n')} independent samples"
                if cfg.model == "encoder"
                else ds.population_reason or POPULATION_METHOD
            ),
            "test_set": test_set_note(cfg, ds, problem),
            "status": traj.status,
            "frozen_at": traj.frozen_at,
        },
    )
    res.limit = limit_section
    # in-memory only (not saved): the engine problem and final state, for figures
    res.problem, res.state = problem, traj.state
    return res


def test_set_note(cfg: Config, ds: Dataset, problem) -> str | None:
    """Where a run's finite test set comes from (None without one)."""
    m = problem.info.get("test_n", 0)
    if not m:
        return None
    if ds.X_test is not None:
        return f"{m} samples from the data file (X_test, y_test)"
    return (
        f"{m} fresh clean samples from the run's test stream (seed {cfg.seed}), drawn in the "
        f"{problem.engine} engine's coordinates: the same seed gives other test samples, and so other "
        "test metrics, on another engine (the population metrics do not depend on the engine)"
    )


def clean_twin(problem, ds: Dataset, cfg: Config, pop, rel: np.ndarray) -> dict:
    """The run's clean-label twin: the same problem (tokens, initialization,
    engine, schedule) trained on the true labels, measured at the end like
    the run itself (population error, else the finite test set). Its error
    is the reference of the excess error label noise causes (SPEC §3).
    Returns its error measures, or the reason it has none."""
    # the run's own log grid (so the same GD form and kernels), population metrics at its ends only
    twin_cfg = cfg.replace(pop_log_points=2)
    evaluate = problem.evaluator(twin_cfg, pop)
    if evaluate is None:
        return {"reason": "no error measure (no population metrics, no test set)"}
    twin_ds = dataclasses.replace(ds, y=ds.y_clean)
    info = dict(problem.info)  # the run's own engine facts, not the twin's
    try:
        stepper = problem.stepper(twin_cfg, rel, y=ds.y_clean)
        traj = dynamics.run(stepper, twin_ds, twin_cfg, evaluate, progress=False)
    except SimulationError as exc:
        return {"reason": f"the clean-label twin failed: {exc}"}
    finally:
        problem.info.clear()
        problem.info.update(info)
    arrays = traj.arrays
    out = {
        k: float(arrays[k][-1]) for k in ("pop_error", "pop_error_se", "pop_error_resolved") if k in arrays
    }
    if "test_acc" in arrays:
        out["test_error"] = 1.0 - float(arrays["test_acc"][-1])
    out["train_acc"] = float(arrays["train_acc"][-1])
    return out


class LimitWatch:
    """Keeps q (engine coordinates) and p at every log point, and after the run
    solves the att-SVM of the final selection, adds ``mm_cos`` to the
    trajectory and returns the "limit" section of the result (SPEC §13)."""

    def __init__(self, problem):
        self.pb = problem
        self.q: list[np.ndarray] = []
        self.p: list[np.ndarray] = []

    def __call__(self, state: dict) -> None:
        self.q.append(state_q(state))
        self.p.append(state["p"].copy())

    def finish(self, cfg: Config, traj, pop) -> dict:
        from .limit import att_svm

        pb, st = self.pb, traj.state
        n = pb.y.size
        X = pb.X2.reshape(n, pb.T, -1)
        alpha = traj.arrays["selected"][-1]
        q_only = "W" in cfg.train_set  # the logit direction q is the variable; else p, with W fixed
        sol = att_svm(X, alpha) if q_only else att_svm(X, alpha, M=st["W"])
        out = {"selection": alpha.tolist(), "variable": "q" if q_only else "p", "feasible": sol.feasible,
               "message": sol.message}  # fmt: skip
        if not sol.feasible:
            traj.arrays["mm_cos"] = np.full(len(self.q), np.nan)
            return out
        U = pb.U_perp
        if q_only:
            q_mm, p_mm = sol.v, None
            qq_mm = float(q_mm @ q_mm)
        else:
            p_mm = sol.v
            q_mm = st["W"] @ p_mm
            qq_mm = pb.q_norm2(st["W"], p_mm)[1]
        cos = []
        for q, p in zip(self.q, self.p):
            dot = float(q @ q_mm)
            if p_mm is not None and U is not None:  # the parts outside span(Q): H p . H p_mm
                dot += float((U @ p) @ (U @ p_mm))
            norm_q = math.sqrt(
                max(float(q @ q) + (float(np.sum((U @ p) ** 2)) if U is not None else 0.0), 0.0)
            )
            cos.append(dot / (norm_q * math.sqrt(qq_mm)) if norm_q > 0 else np.nan)
        traj.arrays["mm_cos"] = np.asarray(cos)
        out.update(norm=math.sqrt(qq_mm), kkt=sol.kkt, support=sol.support, cos=cos[-1])
        if pop is None:
            out["population"] = "no population metrics for this data (see data.population)"
            return out
        nu = st["nu"]
        scalars = (
            q_mm @ pb.mu_pos,
            q_mm @ pb.mu_neg,
            q_mm @ nu,
            qq_mm,
            nu @ pb.mu_pos,
            nu @ pb.mu_neg,
            nu @ nu,
        )
        hard = pop.hard_limit(*scalars)
        out.update(hard)
        out["gen_never"] = hard["relevant_prob"] < cfg.gen_score
        return out
