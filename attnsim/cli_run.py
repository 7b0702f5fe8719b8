"""The command line's run command: ``attnsim run`` (a config, a TOML file or a saved run's folder,
once or over ``--seeds``), what it prints while it works and the run's folder it writes.
:mod:`attnsim.cli` parses and dispatches; every import of the package's numerics here is made
in the function that needs it ("lazy"), as there.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from .cli_args import UsageError


def _saved_run(path: Path) -> tuple[dict, str | None]:
    """The config a run was made with (its folder or result.json) and its data file, when it
    had one: the same file, checked by its SHA-256, or a built-in dataset's name."""
    from .data.real import BUILTIN  # lazy
    from .results import _read_meta, file_hash  # lazy

    if path.is_dir() and not (path / "result.json").exists():
        raise UsageError(f"{path}: a folder: not a config file, and not a run's folder (no result.json)")
    meta = _read_meta(path / "result.json" if path.is_dir() else path)
    data = meta.get("data") or {}
    source = data.get("source")
    if source in BUILTIN:
        return dict(meta["config"]), source
    if "file_sha256" not in data:  # drawn from the data model (a training set, or fresh samples)
        return dict(meta["config"]), None
    if not Path(source).is_file():
        raise UsageError(f"{path}: the run trained on {source}, which is not there now; give it with --data")
    if data["file_sha256"] != file_hash(source):
        raise UsageError(f"{path}: {source} changed since the run (its SHA-256 differs); it cannot run again")
    return dict(meta["config"]), source


def _rerun_values(saved: dict, sets: dict, seeds: bool) -> dict:
    """A saved run's config changed by ``sets`` as :meth:`Config.replace` changes it: the keys the
    saved config derived (n from alpha and d, the default initial scales) are decided again from
    the changed keys; with ``--seeds`` (``seeds``) the saved seed gives way to them."""
    from .config import from_mapping  # lazy

    base = from_mapping(saved)
    values = from_mapping(sets, base=base).to_dict(resolved=False) if sets else dict(saved)
    if seeds:
        values.pop("seed", None)
    return values


def cmd_run(args: argparse.Namespace, t_start: float) -> int:
    from .config import config_values, file_data, from_mapping, parse_set  # lazy
    from .results import check_output_dir, check_run_folder  # lazy

    # the keys the user set (--data warns when it overrides them)
    if args.config is not None and (Path(args.config).is_dir() or str(args.config).endswith(".json")):
        saved, named = _saved_run(Path(args.config))  # a run folder or its result.json: run it again
        values = _rerun_values(saved, parse_set(args.sets), seeds=args.seeds is not None)
    else:
        values = config_values(args.config, args.sets)
        named = file_data(values, args.config) if args.config is not None else None
    if named is not None and args.data is None:
        args.data = named  # data = "FILE.npz" in the config file, as in a sweep file
    if args.engine is not None:
        values["engine"] = args.engine
    if args.preset is not None:
        if not args.preset.strip():
            raise UsageError("--preset: empty; name a preset ('attnsim presets' lists them) or leave it out")
        given = parse_set(args.sets).get("preset")
        if given is not None and str(given).lower() != args.preset.lower():
            raise UsageError(f"--preset {args.preset} and --set preset={given}: name one preset, once")
        values["preset"] = args.preset
    cfg = from_mapping(values)
    _check_plot_kind(args.plot, cfg.model)
    from .data.real import BUILTIN, builtin_name  # lazy

    args.data = builtin_name(args.data)
    if args.data is not None and args.data not in BUILTIN and not Path(args.data).exists():
        raise UsageError(f"--data: {args.data}: no such file (built-in datasets: {', '.join(BUILTIN)})")
    outdir = check_output_dir(args.out if args.out is not None else _default_outdir(cfg))  # before the run
    check_run_folder(outdir, args.force)
    if args.seeds is not None:
        return _run_seeds(args, values, outdir)
    if args.workers is not None:
        raise UsageError("--workers: runs the seeds of --seeds side by side; one run has one process")
    res = _run_one(args, values, outdir)
    if not args.quiet:
        from .report import format_summary  # lazy

        print(format_summary(res))
        files = "result.json, trajectory.npz" + (", trajectory.csv" if args.csv else "")
        print(f"wrote {res.path}/{files}" + (f", {args.plot}.png" if args.plot else ""))
    return 0


def _check_plot_kind(kind: str | None, model: str) -> None:
    """``--plot`` names a figure the model has: a classifier's scores or gaps, another model's metrics."""
    if kind is None:
        return
    from . import registry  # lazy

    classifier = registry.spec(model).classifier
    if classifier and kind == "metrics":
        raise UsageError(f"--plot metrics: model={model} draws its run with --plot scores or --plot gaps")
    if not classifier and kind != "metrics":
        raise UsageError(
            f"--plot {kind}: model={model} has no token scores or gaps; --plot metrics draws its own metrics"
        )


def _run_seeds(args: argparse.Namespace, values: dict, outdir: Path) -> int:
    """``run --seeds``: each seed's run in ``outdir/seed-K``, then one summary."""
    from .config import from_mapping  # lazy
    from .experiments.seeds import parse_seeds, seeds_summary  # lazy
    from .results import remove_runs  # lazy

    if "seed" in values:
        raise UsageError("run: give the seed with --seeds or with the seed key, not both")
    seeds = parse_seeds(args.seeds)
    for k in seeds:  # every seed's config valid before the first run
        from_mapping({**values, "seed": k})
    if args.force:  # the runs attnsim wrote there before (check_run_folder allowed nothing else)
        remove_runs(outdir)
    start = time.perf_counter()
    finished: list[int] = []

    def done(k: int) -> None:
        finished.append(k)
        i = len(finished)
        if not args.quiet and len(seeds) > 1:  # a line per seed: a long --seeds run is never silent
            took = time.perf_counter() - start
            left = "" if i == len(seeds) else f", about {_duration(took / i * (len(seeds) - i))} left"
            print(f"attnsim: seed {k} done ({i} of {len(seeds)}; {_duration(took)} so far{left})",
                  file=sys.stderr, flush=True)  # fmt: skip

    workers = _seed_workers(args.workers, len(seeds))
    if workers > 1:
        runs = _seeds_in_workers(args, values, outdir, seeds, workers, done)
    else:
        runs = []
        for k in seeds:
            runs.append(_run_one(args, {**values, "seed": k}, outdir / f"seed-{k}"))
            done(k)
    if not args.quiet:
        print(seeds_summary(seeds, runs))
        fixed = _fixed_by_file(args.data)
        if fixed:
            print(
                f"note: the data file fixes {', '.join(fixed)}: every seed trains the same run; only the "
                "estimators' draws (population points, test samples) differ, so a spread of training "
                "metrics is 0, not a measure of their variability"
            )
        print(f"wrote {len(runs)} runs in {outdir}/seed-*")
    return 0


SEEDS_PER_WORKER = 4  # --seeds runs on worker processes once there are this many seeds per core


def _seed_workers(asked: int | None, seeds: int) -> int:
    """Worker processes for ``run --seeds``: ``--workers``, else every core once each has
    SEEDS_PER_WORKER seeds (a worker's start, about a second, is then paid back), else none."""
    if asked is not None:
        if asked < 1:
            raise UsageError("--workers: must be >= 1")
        return min(asked, seeds)
    cores = os.cpu_count() or 1
    return max(1, min(cores, seeds // SEEDS_PER_WORKER))


def _seeds_in_workers(args, values: dict, outdir: Path, seeds: list[int], workers: int, done) -> list:
    """Every seed's run (:func:`_run_one`) on ``workers`` spawned processes, each saved in its
    folder as alone; ``done(k)`` as each finishes; the runs read back in seed order. A seed whose
    run fails stops the rest (the error is the run's own, as without workers)."""
    import multiprocessing as mp  # lazy
    from concurrent.futures import ProcessPoolExecutor, as_completed  # lazy

    from .results import load  # lazy
    from .sweep.executors import worker_env  # lazy

    job = {k: v for k, v in vars(args).items() if k != "func"}
    paths: dict[int, str] = {}
    with worker_env():
        pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"))
        try:
            futures = {pool.submit(_seed_job, job, {**values, "seed": k}, str(outdir / f"seed-{k}")): k
                       for k in seeds}  # fmt: skip
            for fut in as_completed(futures):
                paths[futures[fut]] = fut.result()
                done(futures[fut])
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    return [load(paths[k]) for k in seeds]


def _seed_job(job: dict, values: dict, outdir: str) -> str:
    """One seed of ``run --seeds`` in a worker process: its run saved; the folder it is in."""
    return str(_run_one(argparse.Namespace(**job), values, Path(outdir)).path)


def _duration(seconds: float) -> str:
    """Seconds as a person reads them: 42 s, 3 min 5 s, 1 h 2 min."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _fixed_by_file(data: str | None) -> list[str]:
    """The arrays of a data file that fix a run whatever its seed (tokens, labels and the
    initial parameters; [] if the seed still draws any of them)."""
    if data is None or not str(data).endswith(".npz"):
        return []
    from . import registry  # lazy
    from .data.files import member_shapes  # lazy

    names = set(member_shapes(data))
    inits = [("W0", "p0"), *((e.arrays,) for e in registry.MODELS.values() if e.arrays)]
    init = next((list(a) for a in inits if set(a) <= names), None)
    return ["X", "y", *init] if {"X", "y"} <= names and init else []


def _run_one(args: argparse.Namespace, values: dict, outdir: Path):
    """One run of ``attnsim run``, saved (with its plot and CSV if asked); its Result."""
    from .results import OutputError, free_sibling  # lazy
    from .run import simulate  # lazy: the numerical stack

    quiet = args.quiet
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = simulate(
            values,
            data=args.data,
            save_scores=args.save_scores,
            progress=None,
            announce=None if quiet else _announce_compiling(values),
        )
    for w in caught:  # on stderr, once (the summary does not repeat them)
        print(f"attnsim: warning: {w.message}", file=sys.stderr)
    try:
        res.save(outdir, force=args.force)
    except OutputError as exc:  # another run filled the folder meanwhile: keep this one beside it
        kept = free_sibling(outdir)
        res.save(kept)
        print(f"attnsim: warning: {exc}; this run is in {kept}", file=sys.stderr)
        outdir = kept
    if args.csv:
        res.to_csv(outdir / "trajectory.csv")
    if args.plot:
        from .report_figures import plot_result  # lazy: matplotlib

        plot_result(res, args.plot, outdir / f"{args.plot}.png")
    return res


def _announce_compiling(values: dict) -> Callable[[], None]:
    """The line said (once) when a run's kernels are compiled: which model and integrator, since
    each family compiles its own the first time it runs on a machine."""
    model, integrator = values.get("model", "attention"), values.get("integrator", "gd")
    said: list[bool] = []

    def announce() -> None:
        if not said:
            said.append(True)
            print(
                f"attnsim: compiling the kernels of model={model}, integrator={integrator} (once per "
                "machine for each model and integrator, 10-60 s; later runs load them from the cache)",
                file=sys.stderr,
                flush=True,
            )

    return announce


def _default_outdir(cfg) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{stamp}-{cfg.hash()}"
