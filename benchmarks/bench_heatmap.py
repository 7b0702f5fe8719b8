"""Whole-figure seconds of the 39 x 39 loss heatmap (figure 3), from scratch.

Each timing runs ``python -m attnsim.cli figures heatmaps`` in a fresh
process with an empty sweep cache: 1521 runs of 1000 steps on the local
workers (one per core), their 39 setups (one per d) and the plot. With
``--reference`` the same command runs against the attnsim package of another
checkout, alternating with this one (A B, A B, ...: the machine's load drifts
over minutes, so only side-by-side ratios mean much), and the two figures'
numbers (``fig3_heatmaps.txt``) are compared.

Prints, per contender, the wall seconds (median and min-max), the CPU seconds
of the processes (user + system: the workers' work, independent of how well
it is spread over the cores), and the ratio of medians; writes a plot of every
timing (``--plot``, default a file in the temporary folder, whose path is
printed). Target (SPEC §9): <= 25 s on this machine's 2 cores.

Usage::

    python benchmarks/bench_heatmap.py [--reps 3] [--reference PATH_TO_OTHER_CHECKOUT] [--quick]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1]  # this checkout


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_figure(checkout: Path, folder: Path, quick: bool) -> tuple[float, float, str]:
    """(wall s, CPU s, the figure's numbers) of one from-scratch heatmap."""
    shutil.rmtree(folder, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cmd = [sys.executable, "-m", "attnsim.cli", "figures", "heatmaps", "--cache", str(folder / "cache"),
           "--outdir", str(folder / "out")] + (["--quick"] if quick else [])  # fmt: skip
    cpu, t = children_cpu(), time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall, cpu = time.perf_counter() - t, children_cpu() - cpu
    return wall, cpu, (folder / "out" / "fig3_heatmaps.txt").read_text()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--reference", type=Path, help="another checkout of attnsim to time side by side")
    ap.add_argument(
        "--quick", action="store_true", help="the figure's quick grid (a smoke test of this script)"
    )
    ap.add_argument("--plot", type=Path, help="where to write the plot (default: in the temporary folder)")
    args = ap.parse_args()
    contenders = {"this checkout": HERE}
    if args.reference is not None:
        if not (args.reference / "attnsim" / "__init__.py").is_file():
            sys.exit(f"--reference {args.reference}: no attnsim package there")
        contenders["reference"] = args.reference.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="attnsim-bench-heatmap-"))
    for checkout in contenders.values():  # load (or compile) each checkout's kernels once, untimed
        run_figure(checkout, tmp / "warm", quick=True)
    walls: dict[str, list[float]] = {k: [] for k in contenders}
    cpus: dict[str, list[float]] = {k: [] for k in contenders}
    numbers: dict[str, str] = {}
    for rep in range(args.reps):
        for name, checkout in contenders.items():
            wall, cpu, text = run_figure(checkout, tmp / "run", args.quick)
            walls[name].append(wall)
            cpus[name].append(cpu)
            numbers[name] = text
            print(f"rep {rep + 1}: {name:14s} {wall:6.1f} s wall, {cpu:6.1f} s CPU", flush=True)
    grid = "quick grid" if args.quick else "39 x 39 runs"
    print(f"\nloss heatmap from scratch ({grid}), {os.cpu_count()} cores; median (min-max) of {args.reps}")
    first = float(np.median(walls["this checkout"]))
    for name in contenders:
        w, c = walls[name], cpus[name]
        print(f"{name:14s} wall {np.median(w):6.1f} s ({min(w):.1f}-{max(w):.1f})   "
              f"CPU {np.median(c):6.1f} s ({min(c):.1f}-{max(c):.1f})   "
              f"{np.median(w) / first:.2f}x this checkout's wall")  # fmt: skip
    if len(numbers) == 2:
        same = numbers["this checkout"] == numbers["reference"]
        print("the two figures' numbers are", "identical" if same else "DIFFERENT")
    plot = args.plot or tmp / "bench_heatmap.png"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    for name in contenders:
        ax.plot(range(1, args.reps + 1), walls[name], "o-", label=name)
    ax.axhline(25.0, color="0.5", ls="--", lw=1, label="target 25 s")
    ax.set_xlabel("repetition (alternating)")
    ax.set_ylabel("wall seconds")
    ax.set_title(f"loss heatmap from scratch ({grid})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plot, dpi=100)
    print(f"plot: {plot}")
    shutil.rmtree(tmp / "run", ignore_errors=True)
    shutil.rmtree(tmp / "warm", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
