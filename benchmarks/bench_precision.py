"""Microseconds per step of the precision twin beside the exact float64 step, in one process.

The default data (n = 20, T = 8) at each d of ``--d-list``: the float32 twin in its
two graphs (``qform``: z = X (W p), W's gradient and update in one pass; ``official``:
z = (X W) p as the official loop), the bfloat16 twin (qform), and the exact float64
GD step of the dense engine's W form on the same problem (the engine a run uses
at d <= n T + 2; above it the reduced engine's step does not depend on d).
Repetitions alternate between the steppers; the table gives microseconds per step,
median (min-max), and the steps the twin takes in ten minutes. BLAS is pinned to one
thread (``OPENBLAS_NUM_THREADS=1``), as inside a run.

Usage::

    python benchmarks/bench_precision.py [--d-list 200,2000] [--reps 5] [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as in a run's step loop; before NumPy loads BLAS

import numpy as np  # noqa: E402


def _per_step(make, seconds: float) -> float:
    """Microseconds per step over at least ``seconds`` of steps from step 0 (chunks doubled;
    a stepper whose state stops moving, a bfloat16 twin, is started again)."""
    stepper, n, step, total, took = make(), 4, 0, 0, 0.0
    while took < seconds:
        t = time.perf_counter()
        status, reached = stepper.advance(step, n)
        took += time.perf_counter() - t
        total += int(reached) - step
        step = int(reached)
        if status.name != "FINISHED":
            stepper, step = make(), 0
        else:
            n *= 2
    return took / max(total, 1) * 1e6


def _bench(d: int, args) -> None:
    """One d's table (the problem built once, every stepper on it)."""
    from attnsim.config import Config
    from attnsim.data.dataset import make_streams
    from attnsim.models.attention import engines, steppers
    from attnsim.models.attention.precision import PrecisionTwin
    from attnsim.runtime.workspace import Workspace

    cfg = Config(d=d)
    pb, ds = engines.build(cfg, None, make_streams(cfg.seed), "dense", "benchmark", Workspace())
    rel = (ds.roles == 0).astype(np.float64).ravel()
    twin = lambda fmt, graph: PrecisionTwin(  # noqa: E731
        pb.X2, pb.y, pb.W0, pb.p0, pb.nu0, pb.T, rel, cfg.train_set, cfg.lr, fmt, graph=graph
    )
    makers = {
        "float64 exact (dense W form)": lambda: steppers.Segment(
            steppers.ModelArrays(
                pb.X2, pb.y, pb.W0, pb.p0, pb.nu0, pb.T, cfg.lr, cfg.train_set, cfg.loss, rel, cfg.attention
            )
        ),
        "float32 twin, qform": lambda: twin("float32", "qform"),
        "bfloat16 twin, qform": lambda: twin("bfloat16", "qform"),
        "float32 twin, official": lambda: twin("float32", "official"),
    }
    for make in makers.values():  # load (or compile) the kernels
        make().advance(0, 2)
    times: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(args.reps):
        for name, make in makers.items():
            times[name].append(_per_step(make, args.seconds))
    print(f"d = {d}:")
    base = float(np.median(times["float64 exact (dense W form)"]))
    for name, v in times.items():
        med = float(np.median(v))
        reach = 600.0 / (med * 1e-6)
        print(f"  {name:30s} {med:10.1f} us/step ({min(v):.1f}-{max(v):.1f})  {med / base:5.2f}x the "
              f"exact step; {reach:.2g} steps in 10 min")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--d-list", default="200,2000")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.5)
    args = ap.parse_args()

    print(f"precision twin vs the exact step, BLAS threads {os.environ['OPENBLAS_NUM_THREADS']}; "
          f"median (min-max) of {args.reps} timings of >= {args.seconds:g} s")  # fmt: skip
    for d in (int(x) for x in args.d_list.split(",")):
        _bench(d, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
