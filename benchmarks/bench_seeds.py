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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-199")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--baseline", action="append", default=[], help="an older revision or checkout")
    ap.add_argument("--plot", help="write a bar chart of the medians")
    ap.add_argument("--json", default="", help="write the measurements here")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
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
    if args.json:
        rows = {n: {"s": statistics.median(ts), "min": min(ts), "max": max(ts)} for n, ts in times.items()}
        data = {"seeds": args.seeds, "reps": args.reps, "rows": rows, "baseline": variants[-1][0],
                "threads": os.environ["OPENBLAS_NUM_THREADS"], "cores": os.cpu_count()}  # fmt: skip
        with open(args.json, "w") as fh:
            json.dump(data, fh)
    print(f"attnsim run --seeds {args.seeds} (default experiment); OPENBLAS_NUM_THREADS="
          f"{os.environ['OPENBLAS_NUM_THREADS']}, {os.cpu_count()} cores, median of {args.reps}")  # fmt: skip
    width = max(len(n) for n in times)
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"{name:<{width}}  {med:7.1f} s  ({min(ts):.1f}-{max(ts):.1f})  {base / med:5.2f}x the last row"
        )
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
