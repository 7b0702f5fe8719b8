"""Command line: parses and dispatches, nothing else.

Every import of the package below the parser is made in the function that needs
it ("lazy"): ``attnsim --version`` and ``--help`` must not load NumPy, Numba or
matplotlib, and each command loads only what it uses.

Exit codes: 0 ok; 2 bad usage or bad input (one line, no traceback);
1 a run that failed (diverged), or a dependency attnsim cannot run with (one line).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

from ._meta import DependencyError, PlotError, SimulationError
from .cli_args import UsageError, build_parser, load_gallery
from .runtime.streams import StreamError, guard_streams, stream_failed


class Terminated(KeyboardInterrupt):
    """SIGTERM: unwinds like Ctrl-C (workers stopped, temporary files removed), exit 143."""


def main(argv: list[str] | None = None) -> int:
    t_start = time.perf_counter()
    try:
        os.getcwd()
    except FileNotFoundError:
        print("attnsim: error: the working directory was removed; cd into one that exists", file=sys.stderr)
        return 2
    saved = guard_streams()
    previous = _interruptible()
    try:
        code = _dispatch(argv, t_start)
        sys.stdout.flush()  # a full device or a closed pipe shows here, not at exit
        return code
    except StreamError as exc:
        return stream_failed(exc, saved)
    except MemoryError:  # past the estimate every command checks first (a process memory limit, others' use)
        print(
            "attnsim: error: out of memory: the work needed more than this process could get (a memory "
            "limit such as ulimit -v, or other processes); nothing was written. Use smaller n, T, d or "
            "test_n, or fewer workers",
            file=sys.stderr,
        )
        return 1
    except (KeyboardInterrupt, RuntimeError) as exc:
        # a signal handled inside a class body's __set_name__ (an import) arrives wrapped
        cause = exc if isinstance(exc, KeyboardInterrupt) else exc.__cause__
        if not isinstance(cause, KeyboardInterrupt):
            raise
        ended = isinstance(cause, Terminated)
        print(f"attnsim: {'terminated' if ended else 'interrupted'}", file=sys.stderr)
        return 143 if ended else 130
    finally:
        for signum, handler in (previous or {}).items():
            signal.signal(signum, handler)
        sys.stdout, sys.stderr = saved


def _interruptible() -> dict | None:
    """Ctrl-C raises KeyboardInterrupt and SIGTERM :class:`Terminated`, also
    while Numba compiles (see attnsim.runtime.signals.on_signal); returns the handlers
    replaced (None off the main thread)."""
    from .runtime.signals import on_signal  # lazy

    def _interrupt():
        raise KeyboardInterrupt

    def _terminate():
        raise Terminated

    if threading.current_thread() is not threading.main_thread():
        return None
    return {
        signal.SIGINT: on_signal(signal.SIGINT, _interrupt),
        signal.SIGTERM: on_signal(signal.SIGTERM, _terminate),
    }


def _dispatch(argv: list[str] | None, t_start: float) -> int:
    try:
        args = build_parser().parse_args(argv)  # --version and --help end here, before any numerics
    except UsageError as exc:
        print(f"attnsim: error: {exc}", file=sys.stderr)
        return 2
    if args.command in NUMERICAL:
        short = _address_space_short()
        if short:
            print(f"attnsim: error: {short}", file=sys.stderr)
            return 1
    from .runtime.environment import EnvironmentProblem, check_environment  # lazy

    try:
        from .config import ConfigError  # lazy
        from .data.dataset import DataError  # lazy
        from .results import OutputError, ResultError, WriteError  # lazy

        if args.command in ("sweep", "figures"):
            _check_numba()
        plotting = args.command in ("figures", "plot") or getattr(args, "plot", None) is not None
        check_environment(plotting)
    except EnvironmentProblem as exc:
        print(f"attnsim: error: {exc}", file=sys.stderr)
        return 2
    except DependencyError as exc:
        print(f"attnsim: error: {exc}", file=sys.stderr)
        return 1

    try:
        if args.command == "run":
            from .cli_run import cmd_run  # lazy: as every command's code

            return cmd_run(args, t_start)
        if args.command == "check-grad":
            return cmd_check_grad(args)
        if args.command == "sweep":
            return cmd_sweep(args)
        if args.command == "figures":
            return cmd_figures(args)
        if args.command == "real":
            return cmd_real(args)
        if args.command == "plot":
            return cmd_plot(args)
        if args.command == "theory":
            return cmd_theory(args)
        if args.command == "keys":
            from .keys import describe_keys  # lazy

            print(describe_keys())
            return 0
        if args.command == "presets":
            from .presets import listing  # lazy

            print(listing())
            return 0
        build_parser().print_help()
        return 2
    except (UsageError, ConfigError, DataError, OutputError, PlotError, ResultError) as exc:
        print(f"attnsim: error: {exc}", file=sys.stderr)
        return 2
    except SimulationError as exc:
        print(f"attnsim: run failed: {exc}", file=sys.stderr)
        return 1
    except WriteError as exc:  # a full disk, a read-only mount: the one line names the file
        print(f"attnsim: error: {exc}", file=sys.stderr)
        return 1
    except DependencyError as exc:  # raised where a command first loads the kernels
        print(f"attnsim: error: {exc}", file=sys.stderr)
        return 1


# the commands that load NumPy, OpenBLAS and Numba; below this address space (ulimit -v) they fail
# while loading, in the libraries' words (OpenBLAS: "Memory allocation still failed after 10
# retries", or a thread that cannot start); measured: 500 MiB fails with two OpenBLAS threads
NUMERICAL = ("run", "check-grad", "sweep", "figures", "real", "theory")
MIN_ADDRESS_SPACE = 2**30


def _address_space_short() -> str:
    """One line when the process's address-space limit is below :data:`MIN_ADDRESS_SPACE` ("" else)."""
    try:
        import resource  # lazy: POSIX only
    except ImportError:
        return ""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft >= MIN_ADDRESS_SPACE:
        return ""
    return (
        f"the address-space limit (ulimit -v) is {soft / 2**20:.0f} MiB; NumPy, OpenBLAS and Numba need "
        f"about {MIN_ADDRESS_SPACE / 2**20:.0f} MiB to load and run: raise the limit"
    )


def _check_numba() -> None:
    """The kernels' Numba version rule, read from the installed package's
    metadata: sweeps and figures start their worker processes (which load the
    kernels) without importing Numba here."""
    from importlib.metadata import PackageNotFoundError, version  # lazy: ms, only here

    from ._meta import check_numba_version  # lazy

    try:
        check_numba_version(version("numba"))
    except PackageNotFoundError:
        raise DependencyError("attnsim needs numba; pip install numba") from None


# check-grad's central-difference steps: rounding error ~ 1e-16 / h, truncation ~ h^2
H_RANGE = (1e-10, 1e-2)


def cmd_sweep(args: argparse.Namespace) -> int:
    from .results import check_output_dir  # lazy
    from .sweep import read_spec, run_sweep  # lazy

    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers: must be >= 1")
    if args.workers is not None and args.scheduler is not None:
        raise UsageError(
            "--workers: sets the local worker processes; with --scheduler the cluster's run the points"
        )
    check_output_dir(args.out)
    spec = read_spec(args.file)
    check_output_dir(Path(args.out) / spec.name)
    report = run_sweep(spec, args.out, workers=args.workers, scheduler=args.scheduler)
    for msg in report.messages:
        print(f"attnsim: {msg}", file=sys.stderr)
    print(
        f"sweep {spec.name}: {report.ok} of {len(report.keys)} records in {report.root} "
        f"({report.computed} computed now); {report.failed} failed"
    )
    print(f"wrote {report.root / 'records.csv'}")
    return 1 if report.failed else 0


def cmd_real(args: argparse.Namespace) -> int:
    from .config import from_mapping, parse_set, regular_file  # lazy
    from .data.real import BUILTIN, builtin_name  # lazy
    from .experiments.real import format_table, protocol_notes, run_protocol  # lazy
    from .results import check_output_dir  # lazy
    from .sweep.spec import MAX_POINTS  # lazy

    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers: must be >= 1")
    if args.seeds < 1 or min(args.n or [1]) < 1 or not all(0.0 <= e < 0.5 for e in args.eta):
        raise UsageError("real: need --seeds >= 1, every --n >= 1 and every --eta in [0, 0.5)")
    total = (len(set(args.n)) if args.n else 3) * len(args.eta) * args.seeds  # before any list that long
    if total > MAX_POINTS:
        raise UsageError(f"real: {total:.3g} points (n x eta x seeds); at most {MAX_POINTS}")
    args.data = builtin_name(args.data)
    if args.data == "digits":  # the built-in dataset comes with the real extra's scikit-learn
        from .data.real import require_sklearn  # lazy

        require_sklearn("attnsim real digits")
    if args.data not in BUILTIN:
        if not Path(args.data).exists():
            raise UsageError(f"real: {args.data}: no such file (built-in datasets: {', '.join(BUILTIN)})")
        regular_file(args.data, "features")
    base = parse_set(args.sets)
    for key in ("n", "noise_rate", "seed"):
        if key in base:
            raise UsageError(f"real: set {key} with --n, --eta and --seeds, not --set")
    from_mapping(base)  # every --set value checked now, as a sweep checks its base
    check_output_dir(args.out)
    report, rows, messages = run_protocol(
        args.data,
        args.n,
        args.eta,
        list(range(args.seeds)),
        base,
        args.out,
        workers=args.workers,
        progress=True,  # minutes of runs: a bar on stderr even when the output goes to a file
    )
    for msg in messages:
        print(f"attnsim: {msg}", file=sys.stderr)
    print(format_table(rows))
    for note in protocol_notes(rows):
        print(f"note: {note}")
    print(f"wrote {report.root / 'table.csv'}, {report.root / 'records.csv'}")
    return 1 if report.failed else 0


def cmd_plot(args: argparse.Namespace) -> int:
    """Draw a run's folder or a sweep's folder into a PNG beside it."""
    from .report_figures import plot_folder  # lazy: matplotlib
    from .results import check_output_dir  # lazy

    folder = Path(args.folder)
    if args.out is not None:
        check_output_dir(Path(args.out).parent, "--out")
    if not folder.is_dir():
        raise UsageError(f"plot: {folder}: no such folder")
    if not any(
        (folder / f).is_file() for f in ("result.json", "sweep.json", "seed-0/result.json")
    ) and not any(folder.glob("seed-*/result.json")):
        raise UsageError(
            f"plot: {folder} is neither a run (result.json), nor an --seeds folder (seed-K/), nor a sweep "
            "(sweep.json)"
        )
    path, notes = plot_folder(
        folder, args.out, args.metric, args.x_key, args.logy, args.y_key, args.logx, logz=args.logz
    )
    for note in notes:
        print(f"attnsim: {note}", file=sys.stderr)
    print(f"wrote {path}")
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    gallery = load_gallery()  # scripts/gallery of a checkout (UsageError from an installed wheel)
    NAMES, make = gallery.NAMES, gallery.make

    bad = [n for n in args.names if n not in NAMES]
    if bad:
        raise UsageError(f"figures: unknown figure(s) {', '.join(bad)}; choose from {', '.join(NAMES)}")
    from .results import check_output_dir  # lazy

    outdir = (
        args.outdir if args.outdir is not None else ("runs/figures-quick" if args.quick else "figures")
    )  # quick never overwrites figures/
    check_output_dir(outdir, "--outdir")
    check_output_dir(args.cache, "--cache")
    if "real" in (args.names or NAMES):  # before hours of other figures, not after
        from .data.real import require_sklearn  # lazy

        require_sklearn("figures real")
    t = time.perf_counter()
    make(args.names or None, outdir=outdir, quick=args.quick, cache=args.cache)
    print(f"figures done in {time.perf_counter() - t:.1f} s")
    return 0


def cmd_check_grad(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.h) and H_RANGE[0] <= args.h <= H_RANGE[1]):
        raise UsageError(
            f"check-grad --h: the difference step must be in [{H_RANGE[0]:g}, {H_RANGE[1]:g}], "
            f"got {args.h:g}: a smaller step drowns the difference in rounding (float64's 1e-16 over h), "
            "a larger one in the truncation error (h^2); the default 1e-6 balances them"
        )
    if not (math.isfinite(args.tol) and 0 < args.tol < 1):
        raise UsageError(f"check-grad --tol: must be in (0, 1), got {args.tol}")
    if args.seed < 0:
        raise UsageError(f"check-grad --seed: must be >= 0, got {args.seed}")
    from . import registry  # lazy
    from .config import make_config, parse_set  # lazy

    shaping = {"model", "skip"}  # the instance is a small random one: other keys would be ignored
    ignored = sorted(set(parse_set(args.sets)) - shaping)
    if ignored:
        raise UsageError(
            f"check-grad --set {ignored[0]}: the check runs on a small random instance of its own (its "
            f"shapes are printed); only {' and '.join(sorted(shaping))} choose what it checks"
        )
    cfg = make_config(sets=args.sets)
    from .models.gradcheck import check_applied  # lazy
    from .report import grad_verdict  # lazy

    reference = registry.spec(cfg.model).check_grad(cfg, args.seed, args.h)
    applied = check_applied(cfg.model, args.h, args.seed)  # the steppers' kernels, every engine
    print("\n".join(reference.heading + applied.heading))
    errors = {**{f"reference {k}": v for k, v in reference.errors.items()}, **applied.errors}
    width = max(len(block) for errs in errors.values() for block in errs)
    return grad_verdict(errors, args.tol, width=width)


def cmd_theory(args: argparse.Namespace) -> int:
    import json  # lazy

    from . import registry  # lazy
    from .config import parse_set  # lazy
    from .models.base import TheoryError  # lazy

    options = {k: getattr(args, k) for k in ("branch", "rule", "int_tol") if getattr(args, k) is not None}
    if args.transition:
        options["transition"] = True  # a model without a transition refuses it (its spec's theory)
    values = parse_set(args.sets)

    def progress(msg: str) -> None:
        print(f"attnsim theory: {msg}", file=sys.stderr, flush=True)

    try:
        answer = registry.spec(args.model).theory(values, options, progress)
    except TheoryError as exc:
        raise UsageError(f"theory {exc}") from None
    if args.json:
        print(json.dumps(answer.data))
    elif answer.lines:
        print("\n".join(answer.lines))
    if not answer.ok:
        print(f"attnsim theory: not converged: {answer.message}", file=sys.stderr)
        return 1
    return 0


def entry() -> None:
    """The console command: :func:`main`, then :func:`attnsim.runtime.signals.end_process`
    (every result is written and closed and the workers are stopped by then).
    An uncaught exception or SystemExit (--help, --version) ends the usual way."""
    from .runtime.resources import no_huge_pages_unless_asked  # lazy: as every import here

    no_huge_pages_unless_asked()  # before NumPy is imported (attnsim.runtime.resources says why)
    code = main()
    from .runtime.signals import end_process  # lazy

    end_process(code)


if __name__ == "__main__":
    entry()
