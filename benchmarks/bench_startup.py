"""Whole-process latency, as a user feels it, against the floor of any Numba +
SciPy tool.

Commands, run in turn (A B C, A B C, ...) after one warm-up round (the Numba
kernel cache is warm, as after the first run):

* floor: ``python -c "import numba, scipy.special, scipy.linalg"``
* ``attnsim --version``
* ``attnsim run --quiet --out DIR`` (the default experiment), whose
  result.json also gives ``elapsed_s`` (the simulation) and ``startup_s``.

Prints medians with min-max spread and the ratios to the floor. BLAS and
OpenMP threads are pinned to ``--threads`` (the CLI pins BLAS itself inside a
run). Targets (SPEC §9): run <= 1.8x the floor, --version <= 0.6x, elapsed_s
of a fresh default run <= 0.12 s.

Usage::

    python benchmarks/bench_startup.py [--reps 7] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def timed(cmd: list[str], env: dict) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(args.threads)
    exe = shutil.which("attnsim") or sys.exit("attnsim is not on PATH: pip install . first")
    out = Path(tempfile.mkdtemp(prefix="attnsim-bench-"))
    cmds = {
        "floor (import numba, scipy.special, scipy.linalg)": [sys.executable, "-c",
                                                              "import numba, scipy.special, scipy.linalg"],
        "attnsim --version": [exe, "--version"],
        "attnsim run (default experiment)": [exe, "run", "--quiet", "--out", str(out / "run")],
    }  # fmt: skip
    times: dict[str, list[float]] = {k: [] for k in cmds}
    elapsed, startup = [], []
    for rep in range(args.reps + 1):  # the first round warms the caches and is not counted
        for name, cmd in cmds.items():
            t = timed(cmd, env)
            if rep:
                times[name].append(t)
        meta = json.loads((out / "run" / "result.json").read_text())
        if rep:
            elapsed.append(meta["elapsed_s"])
            startup.append(meta["startup_s"])
    shutil.rmtree(out, ignore_errors=True)
    floor = np.median(times[next(iter(cmds))])
    print(f"whole-process seconds, median (min-max) of {args.reps}, BLAS/OpenMP threads {args.threads}")
    for name, v in times.items():
        print(
            f"{name:52s} {np.median(v):6.3f} ({min(v):.3f}-{max(v):.3f})  {np.median(v) / floor:5.2f}x floor"
        )
    print(f"{'fresh default run: elapsed_s (simulation)':52s} {np.median(elapsed):6.3f} "
          f"({min(elapsed):.3f}-{max(elapsed):.3f})")  # fmt: skip
    print(f"{'fresh default run: startup_s (imports, kernel loads)':52s} {np.median(startup):6.3f} "
          f"({min(startup):.3f}-{max(startup):.3f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
