"""One run end to end: config -> model spec -> data -> problem -> driver -> Result."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

# Kernels loaded from Numba's cache import SciPy's BLAS and LAPACK modules at their first
# call, from C: a signal handled while that import runs Python (Ctrl-C, SIGTERM) makes the
# lookup fail, and Numba then aborts the process ("Fatal Python error: BLAS wrapper returned
# with an error"). Imported here, a signal interrupts an ordinary import, and the kernels
# find them loaded.
import scipy.linalg.cython_blas  # noqa: F401
import scipy.linalg.cython_lapack  # noqa: F401

from . import metrics, precision, registry, results, theory
from ._meta import FRESH_INTEGRATORS, PACKAGE_T0, ConfigError
from .config import Config, as_config
from .config_rules import check_data_source
from .data.bayes import of_dataset as bayes_of
from .data.dataset import DataError, Dataset, make_streams
from .runtime.threads import blas
from .runtime.workspace import PROCESS, WORKSPACE, Workspace
from .training import Trained, train_own, train_run


def ensure_compiled(
    integrator: str = "gd",
    announce: Callable[[], None] | None = None,
    model: str = Config.model,
    workspace: Workspace | None = None,
) -> float:
    """Load (or compile, the first time ever) the kernels a run needs, and pay
    every other once-per-process cost (BLAS discovery, quadrature tables,
    first LAPACK calls) here rather than inside the simulation; seconds spent.
    ``announce()`` is called when a kernel is missing from Numba's cache (it compiles)."""
    ws = WORKSPACE if workspace is None else workspace
    if f"{model}/{integrator}" in ws.warm:
        return 0.0
    t = time.perf_counter()  # from here: the hook's import of Numba is start-up too
    hooks = []
    if announce is not None:
        from .runtime.numba_cache import ON_MISS as hooks  # lazy: imports Numba, which the warm-up needs

        hooks.append(announce)  # said when Numba compiles, not when a busy machine loads slowly
    try:
        _warm_up(integrator, model, ws)
    finally:
        if announce in hooks:
            hooks.remove(announce)
    return time.perf_counter() - t


def _warm_up(integrator: str, model: str, ws: Workspace) -> None:
    spec = registry.spec(model)
    with warnings.catch_warnings():  # the warm-up runs' settings are not the user's: nothing to say
        warnings.simplefilter("ignore")
        if f"{model}/gd" not in ws.warm:
            spec.warm_up()
            simulate(spec.warm_configs["gd"], _warmup=True, workspace=ws)
            ws.warm.add(f"{model}/gd")
        if integrator != "gd":
            simulate(spec.warm_configs[integrator], _warmup=True, workspace=ws)
            ws.warm.add(f"{model}/{integrator}")


def _file_identity(data) -> dict:
    """A data file's size and SHA-256, so a result can be traced to the exact bytes it ran on."""
    if not isinstance(data, (str, os.PathLike)) or not Path(data).is_file():
        return {}
    return {"file_bytes": Path(data).stat().st_size, "file_sha256": results.file_hash(data)}


def _check_labels(ds: Dataset) -> None:
    """Labels of one class in a data file: a warning (accuracy and the clean/noisy split say little)."""
    if ds.y.size and np.all(ds.y == ds.y[0]):
        msg = (
            f"{ds.source}: every training label is {ds.y[0]:+g}: a single class (accuracy and the "
            "clean/noisy split say little)"
        )
        ds.warnings.append(msg)
        warnings.warn(msg, stacklevel=4)


def simulate(
    config: Config | Mapping[str, Any] | str | Path | None = None,
    data: str | Path | Dataset | None = None,
    *,
    save_scores: bool = False,
    progress: bool | None = False,
    announce: Callable[[], None] | None = None,
    workspace: Workspace | None = None,
    _warmup: bool = False,
    **keys: Any,
) -> results.Result:
    """Simulate one training run.

    Parameters
    ----------
    config : a :class:`Config`, a mapping of config keys (defaults for the rest), or
        the path of a TOML config file (as ``attnsim run FILE``; its ``data`` key names
        a data file, relative to the TOML file).
    data : optional ``.npz`` path (or Dataset) with user-supplied arrays; n, T, d
        then come from the arrays.
    **keys : config keys over ``config`` (``simulate(d=500, steps=2000)``).
    save_scores : keep every sample's token scores at every log point.
    progress : show a progress bar for long runs (None: only on a terminal).
    announce : called if loading the kernels takes more than a second (the first
        run on a machine compiles them); bad input is refused before that.
    workspace : the caches the run may use and fill (default: the process's
        :data:`attnsim.runtime.workspace.WORKSPACE`).
    """
    return _simulate(config, data, save_scores, progress, announce, workspace, _warmup, keys)


def _simulate(config, data, save_scores, progress, announce, workspace, _warmup, keys) -> results.Result:
    """:func:`simulate`'s body."""
    if workspace is not None and not isinstance(workspace, Workspace):
        raise TypeError(f"workspace: expected an attnsim Workspace, got {type(workspace).__name__}")
    if not isinstance(save_scores, (bool, np.bool_)):  # a truthy word ("no") would save them
        raise TypeError(f"save_scores: expected True or False, got {save_scores!r}")
    ws = WORKSPACE if workspace is None else workspace
    t0 = time.perf_counter()
    config, data = _with_keys(config, data, keys)
    cfg, ds, streams = _open(config, data)
    spec, engine, reason = _plan(cfg, ds, data is not None, save_scores)
    if save_scores and not spec.classifier:
        raise ConfigError(f"save_scores: model={cfg.model} keeps no per-sample token scores")
    startup = 0.0 if _warmup else ensure_compiled(cfg.integrator, announce, cfg.model, ws)
    if not _warmup:
        startup += spec.prepare(cfg, engine, data is not None, ws)  # once per process, counted in start-up
    with blas().limit(limits=spec.setup_threads(cfg, engine), user_api="blas"):
        problem, ds = spec.build(cfg, ds, streams, engine, reason, ws)
    pop = spec.population(cfg, ds, streams.population, ws)
    setup = time.perf_counter() - t0 - startup
    counted = PROCESS.evaluation_s
    if not spec.classifier:  # a model with metrics of its own
        own = train_own(spec, problem, cfg, pop, progress)
        res = _assemble_own(cfg, problem, ds, own, t0, setup, startup)
        res.evaluation_s = PROCESS.evaluation_s - counted
        return res
    kept = ws.kept_run if data is None else None
    run_ = train_run(spec, problem, ds, cfg, pop, save_scores, progress, kept)
    res = _assemble(cfg, data, spec, problem, ds, pop, run_, ws, t0, setup, startup)
    res.evaluation_s = PROCESS.evaluation_s - counted
    return res


def _with_keys(config, data, keys: dict) -> tuple[Any, Any]:
    """``simulate``'s config as a mapping or Config: a TOML file read (its ``data`` key
    taken unless ``data`` is given), keyword keys laid over it."""
    if isinstance(config, (str, os.PathLike)):
        from .config import file_data, load_toml  # lazy: start-up of runs without a file

        path, config = config, load_toml(config)
        named = file_data(config, path)
        data = named if data is None else data
    if keys:
        if isinstance(config, Config):  # its keys as set (a preset keyword then applies under them)
            default = Config(model=config.model)
            config = {k: v for k, v in config.to_dict(resolved=False).items() if v != getattr(default, k)}
        config = {**(config or {}), **keys}
    return config, data


def _open(config, data) -> tuple[Config, Dataset | None, Any]:
    """The run's config (a data file decides the keys its arrays fix), its data
    (None: generated by the model's build) and its random streams."""
    cfg = as_config(config)
    if data is not None and not isinstance(data, (str, os.PathLike, Dataset)):
        raise TypeError(
            f"data: expected a path to an .npz file, a built-in dataset name or a Dataset, "
            f"got {type(data).__name__}"
        )
    streams = make_streams(cfg.seed, cfg.pop_seed)
    if data is None:
        return cfg, None, streams
    from .data.files import changed_keys, config_for_data  # lazy: start-up of runs without a data file
    from .data.real import Source, open_data  # lazy: as above

    explicit = set(config) if isinstance(config, Mapping) else None
    _check_before_reading(cfg, data)
    opened = open_data(data)
    check_data_source(cfg.model, "real" if isinstance(opened, Source) else "file")
    if isinstance(opened, Source):  # real data: one run of the protocol
        _plan(cfg, None, True, save_scores=False)  # its memory and time, before its (n, T, d) tokens exist
        ds = opened.dataset(cfg, streams.data)
        explicit = (changed_keys(cfg) if explicit is None else explicit) - opened.run_keys()
    else:
        ds = opened
    return config_for_data(cfg, ds, explicit=explicit), ds, streams


def check_run(config: Config | Mapping[str, Any], data=None) -> None:
    """Refuse, in one line, what :func:`simulate` would refuse of this config and data,
    without building or training anything (the data opened, the model's plan and
    resources checked)."""
    cfg, ds, _ = _open(config, data)
    _plan(cfg, ds, data is not None, save_scores=False)


def _check_before_reading(cfg: Config, data) -> None:
    """For an .npz data file: plan the run from its arrays' headers (n, T, d of X) and
    check its memory and time before a byte is decompressed (a small file can hold a
    huge array of zeros); a config the shapes make invalid is left to the full read."""
    if not isinstance(data, (str, os.PathLike)) or not str(data).endswith(".npz") or not Path(data).is_file():
        return
    from .data.files import member_shapes  # lazy: as the readers above

    shape = member_shapes(data).get("X", ((), None))[0]
    if len(shape) != 3:
        return
    try:
        sized = cfg.replace(n=int(shape[0]), T=int(shape[1]), d=int(shape[2]))
    except ConfigError:
        return
    spec = registry.spec(sized.model)
    try:
        engine, _ = spec.plan(sized, user_data=True)
        spec.check_resources(sized, engine)
    except ConfigError as exc:
        raise DataError(f"{data}: {exc}") from None


def _plan(cfg: Config, ds: Dataset | None, user_data: bool, save_scores: bool) -> tuple[Any, str, str]:
    """The model's spec, the engine it chose and why; a data file and the run's
    resources checked before any work."""
    spec = registry.spec(cfg.model)
    if ds is not None:
        spec.check_data(cfg, ds)
        _check_labels(ds)
    engine, reason = spec.plan(cfg, user_data=user_data)
    spec.check_resources(cfg, engine, save_scores)
    return spec, engine, reason


def _assemble(
    cfg: Config,
    data,
    spec,
    problem,
    ds: Dataset,
    pop,
    trained: Trained,
    ws: Workspace,
    t0: float,
    setup: float,
    startup: float,
) -> results.Result:
    """The Result: trajectory arrays, final metrics and verdicts, theory, provenance."""
    traj = trained.traj
    arrays = traj.arrays
    arrays["fit_step"] = traj.fit_step
    arrays["y"], arrays["y_clean"] = ds.y, ds.y_clean
    if ds.roles is not None:
        arrays["roles"] = ds.roles
    bayes = bayes_of(ds, cfg.data_model, cfg.shuffle_roles, ws.bayes)
    uniform = metrics.uniform_attention(pop, ds)
    final = metrics.final_metrics(
        arrays,
        ds.n_noisy,
        cfg.benign_error,
        trained.twin or None,
        bayes,
        uniform,
        test_n=problem.info.get("test_n", 0),
        fresh=cfg.integrator in FRESH_INTEGRATORS,
    )
    known = ds.mu_pos is not None and ds.sigma is not None
    theory_section = theory.summary(cfg, traj, known_signal=known)
    final.update(theory.measured_times(cfg, traj))
    low = None
    if trained.precision is not None:
        final_of = lambda a: metrics.final_metrics(  # noqa: E731
            a, ds.n_noisy, cfg.benign_error, None, bayes, uniform, test_n=problem.info.get("test_n", 0)
        )
        low = precision.assemble(trained.precision, arrays, final_of, lambda t: theory.measured_times(cfg, t))
    if trained.limit is not None:
        theory_section["gen_never"] = trained.limit.get("gen_never")
    elapsed = time.perf_counter() - t0 - startup
    return results.Result(
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
        warnings=_run_warnings(
            ds.warnings + traj.warnings, trained.twin.get("warnings", []) + (low or {}).get("warnings", [])
        ),
        data={
            "source": ds.source,
            **_file_identity(data),
            "n_noisy": ds.n_noisy,
            "noisy_index": np.flatnonzero(ds.noisy).tolist(),
            "population": getattr(pop, "method", None) or spec.population_note(ds, problem),
            "bayes": {
                k: bayes[k] for k in ("bayes_method", "bayes_reason", "bayes_error_lower") if k in bayes
            },
            "test_set": test_set_note(cfg.seed, ds, problem),
            "status": traj.status,
            "frozen_at": traj.frozen_at,
        },
        limit=trained.limit,
        precision=low,
        problem=problem,  # in memory only (not saved): the engine problem and final state, for figures
        state=traj.state,
    )


def _assemble_own(cfg: Config, problem, ds, own, t0: float, setup: float, startup: float) -> results.Result:
    """The Result of a model with metrics of its own (:meth:`ModelSpec.findings`)."""
    traj = own.traj
    return results.Result(
        config=cfg.to_dict(),
        trajectory={**traj.arrays, **own.arrays},
        final=own.final,
        theory={},
        engine={"used": problem.engine, "reason": problem.reason, **problem.info},
        versions=results.versions(),
        threads=results.thread_settings(),
        git=dict(results.git_revision()),
        elapsed_s=time.perf_counter() - t0 - startup,
        setup_s=setup,
        startup_s=IMPORT_S + startup,
        warnings=_run_warnings(ds.warnings + traj.warnings, []),
        data={"source": ds.source, **own.notes, "status": traj.status, "frozen_at": traj.frozen_at},
        problem=problem,
        state=traj.state,
    )


def test_set_note(seed: int, ds: Dataset, problem: Any) -> str | None:
    """Where a run's finite test set comes from (None without one)."""
    m = problem.info.get("test_n", 0)
    if not m:
        return None
    if ds.X_test is not None:
        return f"{m} samples from the data file (X_test, y_test)"
    return (
        f"{m} fresh clean samples from the run's test stream (seed {seed}), drawn in the "
        f"{problem.engine} engine's coordinates: the same seed gives other test samples, and so other "
        "test metrics, on another engine (the population metrics do not depend on the engine)"
    )


def _run_warnings(own: list[str], twin: list[str]) -> list[str]:
    """The run's warnings, each once, then its clean-label twin's (labelled, and warned
    now: the twin trained silently), those the run does not already say."""
    said = list(dict.fromkeys(own))
    for w in twin:
        if w.removeprefix("clean-label twin: ") not in said:
            said.append(w)
            warnings.warn(w, stacklevel=4)
    return said


IMPORT_S = time.perf_counter() - PACKAGE_T0  # the package's import up to here, counted in startup_s
