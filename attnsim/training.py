"""A run's training: the driver on its stepper with the paper's recorder, the times located
between log points, and the run's twins beside it (its clean-label twin, the same problem on
the true labels; its precision twin, :mod:`attnsim.precision`), each on a thread of its own
or, with one thread, after it. :func:`attnsim.run.simulate` calls :func:`train_run`."""

from __future__ import annotations

import dataclasses
import functools
import threading
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from . import precision, registry
from ._meta import SimulationError
from .config import Config
from .data.dataset import Dataset
from .driver import Schedule, log_grid, pop_indices, run
from .observers import Recorder, refine_times
from .runtime.threads import Beside, blas


class Trained(NamedTuple):
    traj: Any
    twin: dict
    limit: dict | None
    precision: tuple | None = None  # the precision twin and its trajectory


def train_run(
    spec, problem, ds: Dataset, cfg: Config, pop, save_scores: bool, progress, kept=None
) -> Trained:
    """The run's training with its observers, the clean-label and precision twins (each beside
    the run: on a thread of its own, after it with one thread) and the limit's section; with a
    precision twin, the exact run is ``kept`` (:class:`KeptRun`) or taken from it."""
    rel = ds.relevant_indicator(problem.T)
    limit = spec.limit_watch(problem) if cfg.limit else None
    low = spec.precision_twin(problem, cfg, rel, ds.y)  # the precision twin (None unless asked for)
    stop = threading.Event()  # set when the run fails or is interrupted: its twins stop within a chunk
    on = lambda pb, stepper: drive(pb, ds, cfg, pop, rel, stepper=stepper, quiet=True, stop=stop)  # noqa: E731
    key = precision.exact_key(cfg, save_scores) if low is not None and kept is not None else None
    if key is not None and (hit := kept.take(key)) is not None:  # trained beside another format
        with blas().limit(limits=1, user_api="blas"):
            return hit._replace(precision=precision.beside_kept(low, hit.precision, on, problem))
    watches = [w for w in (limit, None if low is None else low.watch_run) if w is not None]
    watch = (lambda state: [w(state) for w in watches]) if len(watches) > 1 else (watches or [None])[0]
    # one BLAS thread in the step loop and the metrics: the attention model's
    # matrices are small, and the encoder's rank-n products are bound by memory
    # bandwidth (measured: 70 ms per step at d = mlp_dim = 2000 on one thread, 80-140 on two)
    with blas().limit(limits=1, user_api="blas"):
        # the run's stepper first: it trains P(0)'s own arrays; the twin draws them again on its thread
        stepper = problem.stepper(cfg, rel, y=ds.y)
        twin: dict = {}
        job = clean_twin_job(problem, ds, cfg, pop, rel, stop) if cfg.clean_twin and ds.n_noisy else None
        if isinstance(job, dict):  # the reason there is none
            twin, job = job, None
        beside = None
        if low is not None:  # on the other core while the run steps
            beside = precision.Beside(low, on, problem)
        # the clean-label twin on the idle core while the run steps (its evaluations queue with the run's)
        beside_twin = Beside(lambda: twin.update(job(True))) if job is not None else None
        try:
            traj = drive(
                problem,
                ds,
                cfg,
                pop,
                rel,
                save_scores=save_scores,
                progress=progress,
                watch=watch,
                refine=refines_times(cfg),
                stepper=stepper,
            )
            limit_section = limit.finish(cfg, traj, pop) if limit is not None else None
            # waits a signal interrupts (attnsim.runtime.signals): Ctrl-C while a twin trains
            low_run = None if beside is None else beside.result()
            if beside_twin is not None:
                beside_twin.result()
        except BaseException:  # the run failed or was interrupted: its twins stop at their next chunk
            stop.set()
            if beside is not None:
                beside.cancel()
            if beside_twin is not None:
                beside_twin.abandon()
            raise
    if key is not None:  # the run, what its twin watched and its engine's facts
        kept.keep(key, Trained(traj, twin, limit_section, precision.watched(low, problem)))
    return Trained(traj, twin, limit_section, low_run)


def train_own(spec, problem, cfg: Config, pop, progress) -> Any:
    """The run of a model that is not a classifier: the driver along the log grid with the
    model's recorder and evaluator (its signals, progress and divergence handled as every run's),
    then the model's findings (:class:`attnsim.models.base.Own`)."""
    grid = log_grid(cfg.steps, cfg.log_scale, cfg.log_every, cfg.log_points)
    schedule = Schedule(grid, pop_indices(len(grid), cfg.pop_log_points), cfg.lr, progress, False)
    with blas().limit(limits=1, user_api="blas"):
        traj = run(problem.stepper(cfg), spec.recorder(grid), schedule, problem.evaluator(cfg, pop))
        return spec.findings(problem, traj, cfg, pop)


def refines_times(cfg: Config) -> bool:
    """Whether a run locates its times between log points (a bisection that steps
    again): ``refine_times``, whose ``auto`` means with the flow or the limit."""
    if cfg.refine_times != "auto":
        return cfg.refine_times == "true"
    return cfg.integrator == "flow" or cfg.limit


def drive(
    problem,
    ds: Dataset,
    cfg: Config,
    pop,
    rel: np.ndarray,
    save_scores: bool = False,
    progress: bool | None = False,
    watch=None,
    refine: bool = False,
    stepper=None,
    quiet: bool = False,
    final_only: bool = False,
    stop: threading.Event | None = None,
):
    """The driver on ``problem``'s stepper (or ``stepper``, another of the same problem)
    along the run's log grid, recording the paper's metrics; with ``refine`` the times of
    generalization and of the settled population loss are located between log points;
    ``final_only`` evaluates at the last log point alone (a twin, measured at its end)."""
    grid = log_grid(cfg.steps, cfg.log_scale, cfg.log_every, cfg.log_points)
    stepper = problem.stepper(cfg, rel, y=ds.y) if stepper is None else stepper
    evaluate = problem.evaluator(cfg, pop)
    x_Wp = logits_are_x_Wp(cfg.model)
    recorder = Recorder(ds, grid, save_scores, cfg.lr, cfg.d, optimizer=cfg.optimizer, logit_x_Wp=x_Wp)
    recorder.quiet = quiet
    at = [len(grid) - 1] if final_only else pop_indices(len(grid), cfg.pop_log_points)
    schedule = Schedule(grid, at, cfg.lr, progress, cfg.log_scale == "log", stop=stop)
    traj = run(stepper, recorder, schedule, evaluate, watch=watch, snapshots=refine)
    arrays = traj.arrays
    if refine and evaluate is not None and traj.frozen_at is None and "pop_score_relevant" in arrays:
        traj.refined = refine_times(
            stepper, traj.snapshots, arrays, evaluate, cfg.gen_score, integer=cfg.integrator == "gd"
        )
    traj.snapshots = {}
    return traj


def clean_twin(problem: Any, ds: Dataset, cfg: Config, pop: Any, rel: np.ndarray) -> dict:
    """The run's clean-label twin: the same problem (tokens, initialization,
    engine, schedule) trained on the true labels, measured at the end like
    the run itself (population error, else the finite test set). Its error
    is the reference of the excess error label noise causes (SPEC §3).
    Returns its error measures, or the reason it has none."""
    job = clean_twin_job(problem, ds, cfg, pop, rel)
    return job if isinstance(job, dict) else job(False)


def clean_twin_job(
    problem: Any, ds: Dataset, cfg: Config, pop: Any, rel: np.ndarray, stop: threading.Event | None = None
) -> dict | Callable:
    """:func:`clean_twin` as a function ``train(quiet)`` to call on any thread (``quiet``: on
    a thread of its own, its warnings returned, never warned: the warnings filters belong to
    the process, not to a thread), its stepper built by ``train`` (building it records engine
    facts in ``problem.info``: the run's own, taken now, are put back, and nothing reads them
    before the twin is done); or the reason it has none."""
    # the run's own log grid (so the same GD form and kernels), population metrics at its end
    # only (at step 0 the twin is the run: the same P(0), the same measure)
    if problem.evaluator(cfg, pop) is None:
        return {"reason": "no error measure (no population metrics, no test set)"}
    twin_cfg = cfg.replace(pop_log_points=2)
    twin_ds = dataclasses.replace(ds, y=ds.y_clean)
    info = dict(problem.info)  # the run's own engine facts, not the twin's

    def build():
        try:
            return problem.stepper(twin_cfg, rel, y=twin_ds.y)
        finally:
            problem.info.clear()
            problem.info.update(info)

    def train(quiet: bool) -> dict:
        go = functools.partial(
            drive, problem, twin_ds, twin_cfg, pop, rel, quiet=quiet, final_only=True, stop=stop
        )
        try:
            if quiet:
                traj = go(stepper=build())
            else:
                with warnings.catch_warnings():  # its warnings are the run's, said once and labelled below
                    warnings.simplefilter("ignore")
                    traj = go(stepper=build())
        except SimulationError as exc:
            return {"reason": f"the clean-label twin failed: {exc}"}
        arrays = traj.arrays
        out: dict[str, Any] = {"warnings": [f"clean-label twin: {w}" for w in dict.fromkeys(traj.warnings)]}
        for k in (k for k in ("pop_error", "pop_error_se", "pop_error_resolved") if k in arrays):
            out[k] = float(arrays[k][-1])
        if "test_acc" in arrays:
            out["test_error"] = 1.0 - float(arrays["test_acc"][-1])
        out["train_acc"] = float(arrays["train_acc"][-1])
        return out

    return train


def logits_are_x_Wp(model: str) -> bool:
    """Whether a model's attention logits are x . W p (the attention model's: its trained blocks
    include W and p), so the saturation advice's formulas in lr, sigma and d apply."""
    return {"W", "p"} <= set(registry.MODELS[model].blocks)
