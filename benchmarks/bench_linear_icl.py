"""Linear attention in context: attnsim's ridge endpoint beside the authors' own simulation
(Pehlevan-Group/incontext-asymptotics-experiments, theory_runs/common.py's errors_from_DATA,
unmodified: it builds the d(d+1)-square normal equations and solves them), one draw at a time at
their quick figure's setting (alpha = tau = 10, rho = 0.01, lambda = 1e-6, kappa = 0.2), interleaved,
median of the repetitions. Their code is not part of attnsim; give a checkout of it:

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_linear_icl.py --their-code DIR [--reps 3]

Without it the table holds attnsim's times alone. Both run on one BLAS thread (attnsim trains
on one). Also times their whole quick figure (12 kappas x 20 draws at d = 10 and 32) from the
per-draw medians, and attnsim's at d = 64 and 128.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import attnsim

KEYS = {"context_ratio": 10.0, "sample_ratio": 10.0, "noise_var": 0.01, "ridge": 1e-6, "task_ratio": 0.2}


def ours(d: int, seed: int) -> float:
    t = time.perf_counter()
    attnsim.simulate({"model": "linear_icl", "d": d, "seed": seed, **KEYS})
    return time.perf_counter() - t


def theirs(d: int, code: str) -> float:
    sys.path.insert(0, os.path.join(code, "theory_runs"))
    from common import errors_from_DATA  # their module, from their checkout

    t = time.perf_counter()
    errors_from_DATA(d, KEYS["context_ratio"], KEYS["task_ratio"], KEYS["sample_ratio"], KEYS["noise_var"],
                     KEYS["ridge"], 1)  # fmt: skip
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--their-code", help="a checkout of Pehlevan-Group/incontext-asymptotics-experiments")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    ours(10, 0)  # kernels, imports
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
    print(f"OPENBLAS_NUM_THREADS={threads}; median of {args.reps}, one draw")
    print("| d | attnsim s per draw (spread) | theirs s per draw (spread) | ratio |")
    print("|---|---|---|---|")
    per = {}
    for d in (10, 32, 64, 128):
        a, b = [], []
        for r in range(args.reps):
            a.append(ours(d, r))
            if args.their_code and d <= 64:
                b.append(theirs(d, args.their_code))
        ma = statistics.median(a)
        cell = f"{ma:.4f} ({min(a):.4f}-{max(a):.4f})"
        if b:
            mb = statistics.median(b)
            per[d] = (ma, mb)
            print(f"| {d} | {cell} | {mb:.3f} ({min(b):.3f}-{max(b):.3f}) | {mb / ma:.0f}x |")
        else:
            print(f"| {d} | {cell} | - | - |")
        sys.stdout.flush()
    if 10 in per and 32 in per:
        total_a = 240 * (per[10][0] + per[32][0])
        total_b = 240 * (per[10][1] + per[32][1])
        print(f"their quick figure (12 kappas x 20 draws at d = 10 and 32): attnsim {total_a:.0f} s, "
              f"theirs {total_b:.0f} s ({total_b / total_a:.0f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
