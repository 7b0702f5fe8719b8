"""Microseconds per gradient step of the two GD forms, side by side in one process.

The default run's problem in the reduced engine (k = r = n T + 2 = 162), the
same state for both forms: the W form (:class:`attnsim.models.attention.steppers.Segment`, which
updates W) and the X W form (:class:`attnsim.models.attention.steppers.SegmentXW`, which updates
B = X W and rebuilds W only when asked; README, "The X W form of a step").
Repetitions alternate between the forms (W, X W, W, X W, ...), each timing
``--steps`` steps from step 0; the table gives microseconds per step, median
(min-max), the milliseconds one rebuild of W takes, and those of what the
driver asks at a log point in the X W form (outputs, |W - W(0)| and q = W p,
which need no rebuild). BLAS is pinned to one thread, as inside a run.

Usage::

    python benchmarks/bench_step.py [--steps 20000] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as in a run's step loop; before NumPy loads BLAS

import numpy as np  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()

    from attnsim.config import Config
    from attnsim.data.dataset import make_streams
    from attnsim.models.attention import engines, steppers
    from attnsim.runtime.workspace import Workspace

    cfg = Config()
    pb, ds = engines.build(cfg, None, make_streams(cfg.seed), "reduced", "benchmark", Workspace())
    rel = (ds.roles == 0).astype(np.float64).ravel()
    prob = (pb.X2, pb.y, pb.W0, pb.p0, pb.nu0, pb.T, cfg.lr, cfg.train_set, cfg.loss, rel)
    forms = {"W form": steppers.Segment, "X W form": steppers.SegmentXW}
    for cls in forms.values():  # load (or compile) the kernels
        cls(*prob).advance(0, 2)
    per_step: dict[str, list[float]] = {name: [] for name in forms}
    rebuild: list[float] = []
    log_point: list[float] = []
    for _ in range(args.reps):
        for name, cls in forms.items():
            seg = cls(*prob)
            t = time.perf_counter()
            seg.advance(0, args.steps)
            per_step[name].append((time.perf_counter() - t) / args.steps * 1e6)
            if cls is steppers.SegmentXW:
                t = time.perf_counter()
                seg.rebuild(seg.B)
                rebuild.append((time.perf_counter() - t) * 1e3)
                t = time.perf_counter()  # what the driver asks at a log point, W never rebuilt
                seg.observe(), seg.extra_metrics(), seg.state().q()
                log_point.append((time.perf_counter() - t) * 1e3)
    threads = os.environ["OPENBLAS_NUM_THREADS"]
    print(f"gradient steps of the default problem (reduced, k = {pb.k}, r = {pb.r}), {args.steps} steps")
    print(f"per timing, BLAS threads {threads}; median (min-max) of {args.reps}")
    med = {name: float(np.median(v)) for name, v in per_step.items()}
    for name, v in per_step.items():
        ratio = med["W form"] / med[name]
        print(f"{name:10s} {med[name]:7.1f} us/step ({min(v):.1f}-{max(v):.1f})   {ratio:.2f}x")
    r_med = float(np.median(rebuild))
    saving = med["W form"] - med["X W form"]
    l_med = float(np.median(log_point))
    print(f"X W form: rebuilding W takes {r_med:.2f} ms ({min(rebuild):.2f}-{max(rebuild):.2f}); a log point")
    lo, hi = min(log_point), max(log_point)
    print(f"(outputs, |W - W(0)|, q = W p, no rebuild) {l_med:.2f} ms ({lo:.2f}-{hi:.2f}),")
    print(f"what the X W form saves in {l_med * 1e3 / saving:.0f} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
