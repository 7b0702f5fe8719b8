"""``attnsim run --seeds`` of the default experiment: wall time of the whole command, side by side,
interleaved, median of ``--reps``: this checkout on its worker processes (the default), this
checkout with ``--workers 1``, and older revisions (``--baseline REV``: a revision of this
repository, checked out into a temporary worktree and removed after, or a checkout's folder),
each run once first so its kernels are compiled:

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_seeds.py [--seeds 0-199] [--reps 3]
        [--baseline 70b8a38 ...] [--plot F.png] [--json F.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from attnsim.cli import main; sys.exit(main())"


def timed(source: Path, seeds: str, extra: list[str], out: Path) -> float:
    """Seconds of the whole command with the attnsim of ``source``, run from ``out``'s folder
    (from a checkout, python -c would import the attnsim of the working directory first)."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    shutil.rmtree(out, ignore_errors=True)
    probe = [sys.executable, "-c", "import attnsim; print(attnsim.__file__)"]
    where = subprocess.run(probe, env=env, cwd=out.parent, capture_output=True, text=True, check=True).stdout
    where = where.strip()
    if not Path(where).resolve().is_relative_to(source.resolve()):
        raise SystemExit(f"{source}: its attnsim is not the one imported ({where})")
    cmd = [sys.executable, "-c", CLI, "run", "--seeds", seeds, "--out", str(out), "--quiet", *extra]
    t = time.perf_counter()
    subprocess.run(
        cmd, env=env, cwd=out.parent, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return time.perf_counter() - t


def seed_floor(reps: int) -> dict:
    """Seconds per seed, one core, of the work every implementation of a default run with these
    results does: W(0)'s d^2 draws and its two products with the k- and r-column bases (4 d^2 k
    flops: M = Q^T W(0) and the Gram matrix of W(0) R), the token noise's n T d draws, the run's
    and its clean-label twin's GD steps at the reduced step's floor and the population
    evaluations at theirs (benchmarks/floor_kernels.py); the bases, the tail estimator's search,
    records and start-up count 0. Medians of ``reps``."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import floor_kernels as FK
    from bench_floors import default_problem, population_floor_args

    from attnsim.models.attention import steppers

    with threadpool_limits(limits=1, user_api="blas"):
        cfg, pb, ds, prob = default_problem()
        d, nT, k, r = cfg.d, cfg.n * cfg.T, pb.X2.shape[1], pb.p0.size
        rng = np.random.default_rng(0)
        W = np.empty((d, d))
        QT = np.ascontiguousarray(np.linalg.qr(rng.standard_normal((d, k)))[0].T)
        RT = np.ascontiguousarray(np.linalg.qr(rng.standard_normal((d, r)))[0].T)

        def setup() -> None:
            rng.random(out=W.reshape(-1))
            QT @ W
            N = RT @ W.T
            N @ N.T
            rng.standard_normal((nT, d))

        xw = steppers.SegmentXW(prob)
        B, K, p = xw.B.copy(), np.ascontiguousarray(xw.K), pb.p0.copy()
        c, z, v, gp = np.full(nT, 1e-3), np.empty(nT), np.empty(nT), np.empty(r)
        _, _, fargs, _ = population_floor_args(cfg, ds)
        parts = {
            "setup_s": setup,
            "steps_s": lambda: FK.reduced_xw_step_floor(B, K, p, c, 1e-9, 2 * cfg.steps, z, v, gp),
            "evaluations_s": lambda: [FK.population_floor(*fargs) for _ in range(cfg.pop_log_points)],
        }
        out = {}
        for name, fn in parts.items():
            fn()
            ts = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t)
            out[name] = statistics.median(ts)
    out["per_seed_s"] = sum(out.values())
    out["sizes"] = {
        "d": d,
        "k": k,
        "r": r,
        "tokens": nT,
        "steps": 2 * cfg.steps,
        "evaluations": cfg.pop_log_points,
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-199")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--baseline", action="append", default=[], help="an older revision or checkout")
    ap.add_argument("--plot", help="write a bar chart of the medians")
    ap.add_argument("--json", default="", help="write the measurements here")
    ap.add_argument("--floor-only", action="store_true", help="print the floor per seed and stop")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if args.floor_only:
        print(json.dumps(seed_floor(max(args.reps, 5)), indent=1))
        return
    variants = [
        ("this checkout (workers: default)", ROOT, []),
        ("this checkout, --workers 1", ROOT, ["--workers", "1"]),
    ]
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as trees:
        for b in args.baseline:
            tree = Path(b) if Path(b).is_dir() else None
            source = tree or trees.enter_context(_worktree(b, Path(tmp) / f"rev-{b}"))
            variants.append((_revision(source) + (f" at {b}" if tree else ""), source, []))
        for _, source, extra in variants:  # compile (or load) each checkout's kernels first
            timed(source, "0-1", extra, Path(tmp) / "warm")
        times: dict[str, list[float]] = {name: [] for name, *_ in variants}
        for _ in range(args.reps):
            for name, source, extra in variants:
                times[name].append(timed(source, args.seeds, extra, Path(tmp) / "out"))
    base = statistics.median(times[variants[-1][0]])
    threads = os.environ["OPENBLAS_NUM_THREADS"]  # the runs' (importing bench_floors pins it to 1)
    floor = seed_floor(max(args.reps, 5))
    if args.json:
        rows = {n: {"s": statistics.median(ts), "min": min(ts), "max": max(ts)} for n, ts in times.items()}
        data = {"seeds": args.seeds, "reps": args.reps, "rows": rows, "baseline": variants[-1][0],
                "threads": threads, "cores": os.cpu_count(),
                "floor": floor}  # fmt: skip
        with open(args.json, "w") as fh:
            json.dump(data, fh)
    print(f"attnsim run --seeds {args.seeds} (default experiment); OPENBLAS_NUM_THREADS="
          f"{threads}, {os.cpu_count()} cores, median of {args.reps}")  # fmt: skip
    width = max(len(n) for n in times)
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"{name:<{width}}  {med:7.1f} s  ({min(ts):.1f}-{max(ts):.1f})  {base / med:5.2f}x the last row"
        )
    from attnsim.experiments.seeds import parse_seeds

    n = len(parse_seeds(args.seeds))
    cores = os.cpu_count() or 1
    bound = n * floor["per_seed_s"] / cores
    print(f"floor per seed, one core: {1e3 * floor['per_seed_s']:.1f} ms (W(0) and noise draws, products "
          f"{1e3 * floor['setup_s']:.1f}; steps {1e3 * floor['steps_s']:.1f}; evaluations "
          f"{1e3 * floor['evaluations_s']:.1f}); {n} seeds on {cores} cores >= {bound:.1f} s: at most "
          f"{base / bound:.2f}x the last row")  # fmt: skip
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 0.6 * len(times) + 1.2))
        ax.barh(list(times), [statistics.median(t) for t in times.values()])
        ax.set_xlabel(f"seconds for --seeds {args.seeds}")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"wrote {args.plot}")


def _revision(path: Path) -> str:
    cmd = ["git", "-C", str(path), "rev-parse", "--short", "HEAD"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    return f"revision {out.stdout.strip() or '?'}" + (" (this checkout)" if path == ROOT else "")


@contextlib.contextmanager
def _worktree(rev: str, where: Path):
    """Revision ``rev`` of this repository checked out at ``where`` (a detached worktree), removed after."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), rev], check=True,
                   capture_output=True)  # fmt: skip
    try:
        yield where
    finally:
        cmd = ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)]
        subprocess.run(cmd, capture_output=True)


if __name__ == "__main__":
    main()
