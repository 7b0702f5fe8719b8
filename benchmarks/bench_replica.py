"""The replica theory's fixed points: the compiled proximal map against the vectorized NumPy one it
replaced (the same Newton method; the table says whether the answers agree to the bit), side by side
in one process on the published settings (sigma = 0.5, lambda = 0.01; omega 0-0.5, alpha 0.1-3, both
teacher matrices, the three branches), each solve() from scratch (Gauss-Hermite orders raised until
the answer stops moving), median of the repetitions:

    OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python benchmarks/bench_replica.py [--reps 3] [--plot F.png]

One thread each (NUMBA_NUM_THREADS=1 pins the compiled map's parallel loop to one core, the
target's setting; unset, it uses every core).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from attnsim.models.positional_semantic import replica as R

# (label, settings, branch): the published block's corners and middle
CASES = [
    ("semantic, omega 0.3, alpha 1.5", {"alpha": 1.5, "omega": 0.3}, "semantic"),
    ("positional, omega 0.3, alpha 1.5", {"alpha": 1.5, "omega": 0.3}, "positional"),
    ("semantic, omega 0.3, alpha 0.1", {"alpha": 0.1, "omega": 0.3}, "semantic"),
    ("semantic, omega 0.5, alpha 3", {"alpha": 3.0, "omega": 0.5}, "semantic"),
    ("positional, omega 0.1, alpha 0.6", {"alpha": 0.6, "omega": 0.1}, "positional"),
    ("agnostic, omega 0.3, alpha 1", {"alpha": 1.0, "omega": 0.3}, "agnostic"),
    ("semantic, A = [[0.8, 0.2], [0.3, 0.7]], alpha 2", {"alpha": 2.0, "teacher_A": ((0.8, 0.2), (0.3, 0.7))},
     "semantic"),
]  # fmt: skip


def timed(settings: dict, branch: str, proximal: str) -> tuple[float, R.Solution]:
    t = time.perf_counter()
    sol = R.solve(R.Settings(**settings), branch, proximal=proximal)
    return time.perf_counter() - t, sol


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--plot", help="write a bar chart of the two times per case")
    ap.add_argument("--json", default="", help="write the measurements here")
    args = ap.parse_args()
    timed({"alpha": 1.5}, "semantic", "global")  # the compiled map loaded (or compiled) once
    env = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")}
    pinned = ", ".join(f"{k}={v}" for k, v in env.items())
    print(f"{pinned}; median of {args.reps}, each solve() from scratch")
    print("| fixed point | orders | compiled s (spread) | NumPy s (spread) | ratio | same answer |")
    print("|---|---|---|---|---:|---|")
    rows, table = [], []
    for label, settings, branch in CASES:
        fast, slow, sols = [], [], []
        for _ in range(args.reps):  # interleaved: the machine's load falls on both alike
            t, a = timed(settings, branch, "global")
            fast.append(t)
            t, b = timed(settings, branch, "numpy")
            slow.append(t)
            sols.append((a, b))
        a, b = sols[-1]
        keys = ("q", "m", "V", "theta", "mse", "Phi")
        equal = all(getattr(a, k) == getattr(b, k) for k in keys)
        same = "bit for bit" if a.converged == b.converged and (not a.converged or equal) else "DIFFERS"
        orders = ",".join(str(h[0]) for h in (a.history or [])) or "-"
        mf, ms = statistics.median(fast), statistics.median(slow)
        rows.append((label, mf, ms))
        table.append({"case": label, "orders": orders, "compiled_s": mf, "compiled_min": min(fast),
                      "compiled_max": max(fast), "numpy_s": ms, "numpy_min": min(slow),
                      "numpy_max": max(slow), "same": same})  # fmt: skip
        print(f"| {label} | {orders} | {mf:.3f} ({min(fast):.3f}-{max(fast):.3f}) | {ms:.2f} "
              f"({min(slow):.2f}-{max(slow):.2f}) | {ms / mf:.0f}x | {same} |")  # fmt: skip
        sys.stdout.flush()
    ratios = [s / f for _, f, s in rows]
    print(f"ratio: median {statistics.median(ratios):.0f}x, range {min(ratios):.0f}-{max(ratios):.0f}x; "
          f"slowest compiled fixed point {max(f for _, f, _ in rows):.2f} s")  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": table, "threads": env, "reps": args.reps}, fh)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4))
        y = np.arange(len(rows))
        ax.barh(y - 0.2, [f for _, f, _ in rows], 0.4, label="compiled (replica_kernels)")
        ax.barh(y + 0.2, [s for _, _, s in rows], 0.4, label="NumPy (replica_maps.prox)")
        ax.set_yticks(y, [r[0] for r in rows], fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("seconds per fixed point (median)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
