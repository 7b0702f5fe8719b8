"""Whole-figure seconds of the 39 x 39 loss heatmap (figure 3), from scratch.

Each timing runs ``python -m attnsim.cli figures heatmaps`` in a fresh
process with an empty sweep cache: 1521 runs of 1000 steps on the local
workers (one per core), their 39 setups (one per d) and the plot. With
``--reference`` the same command runs against the attnsim package of another
checkout, alternating with this one (A B, A B, ...: the machine's load drifts
over minutes, so only side-by-side ratios mean much), and the two figures'
numbers (``fig3_heatmaps.txt``) are compared. The share of the CPU seconds
spent inside the simulations is the records' ``cpu_s`` (each worker's process
time around its ``simulate`` call) over the CPU seconds of every process; the
rest is start-up, kernel loading, planning, records, the CSV and the plot
(SPEC §9: at least 90 % inside).

Prints, per contender, the wall seconds (median and min-max), the CPU seconds
of the processes (user + system: the workers' work, independent of how well
it is spread over the cores), and the ratio of medians; writes a plot of every
timing (``--plot``, default a file in the temporary folder, whose path is
printed). Target (SPEC §9): <= 25 s on this machine's 2 cores.

Beside the timings, a lower bound of each sweep's CPU seconds whatever the code
(nothing run, its points read from the sweep): every run and its clean-label twin
priced at the attention model's GD floor (``bench_gallery_floor.priced``: the
cheaper of the W and X W forms' floor kernels, one BLAS thread as in a worker),
and every setup group (d, seed) at what the reduced setup cannot avoid: W(0)'s
d^2 draws (once per seed, at its largest d: smaller d read a prefix of the same
stream) and its two products with k-column bases (Q^T W(0), then W(0) R: R
depends on the first), 4 d^2 k flops, as NumPy's BLAS does them, measured at
each d. Everything else (bases, evaluations, records, start-up, the plot)
counts 0; over the cores, the sum bounds the wall seconds.

Usage::

    python benchmarks/bench_heatmap.py [--reps 3] [--reference PATH_TO_OTHER_CHECKOUT] [--quick]
"""

from __future__ import annotations

import argparse
import json
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


def simulation_cpu(cache: Path) -> float:
    """CPU seconds the workers spent inside the simulations: the records' ``cpu_s``."""
    total = 0.0
    for rec in cache.rglob("records/*.json"):
        total += json.loads(rec.read_text()).get("cpu_s") or 0.0
    return total


def run_figure(checkout: Path, folder: Path, quick: bool) -> tuple[float, float, str, float]:
    """(wall s, CPU s, the figure's numbers, CPU s inside the simulations) of one from-scratch heatmap."""
    shutil.rmtree(folder, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cmd = [sys.executable, "-m", "attnsim.cli", "figures", "heatmaps", "--cache", str(folder / "cache"),
           "--outdir", str(folder / "out")] + (["--quick"] if quick else [])  # fmt: skip
    cpu, t = children_cpu(), time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall, cpu = time.perf_counter() - t, children_cpu() - cpu
    return wall, cpu, (folder / "out" / "fig3_heatmaps.txt").read_text(), simulation_cpu(folder / "cache")


SWEEP = """[sweep]
name = "fig3_heatmap"
seeds = {seeds}
[base]
steps = 1000
log_every = 1000
pop_log_points = 2
engine = "reduced"
[grid]
signal_norm = {grid_s}
d = {grid_d}
"""


def run_sweep_only(checkout: Path, folder: Path, quick: bool, seeds: int = 1) -> tuple[float, float, float]:
    """(wall s, CPU s, CPU s inside the simulations) of the figure's sweep run
    by ``attnsim sweep`` from scratch: the workers, the records and the CSV,
    without the figure's plot (``seeds``: seeds 0 .. seeds - 1 in every cell)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    grids = _grids(quick)
    (folder / "heatmap.toml").write_text(SWEEP.format(grid_s=grids[0], grid_d=grids[1], seeds=seeds))
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cmd = [
        sys.executable,
        "-m",
        "attnsim.cli",
        "sweep",
        str(folder / "heatmap.toml"),
        "--out",
        str(folder / "sw"),
    ]
    cpu, t = children_cpu(), time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall, cpu = time.perf_counter() - t, children_cpu() - cpu
    return wall, cpu, simulation_cpu(folder / "sw")


def sweep_points(quick: bool, seeds: int) -> list:
    """The points of :data:`SWEEP` (the figure's grid, seeds 0 .. seeds - 1), read, not run."""
    import tomllib

    from attnsim.sweep import parse_sweep

    grids = _grids(quick)
    return parse_sweep(tomllib.loads(SWEEP.format(grid_s=grids[0], grid_d=grids[1], seeds=seeds))).points()


def _grids(quick: bool) -> tuple[str, str]:
    return (("[5.0, 10.0, 20.0, 50.0, 100.0]", "[250, 1000, 2500, 5000]") if quick else
            ("{start = 5.0, stop = 100.0, num = 39}", "{start = 250, stop = 5000, step = 125}"))  # fmt: skip


def floor_bound(quick: bool, seeds: list[int]) -> dict[int, dict]:
    """Per number of seeds: the lower bound of the sweep's CPU seconds (module docstring),
    as {"steps_s", "setups_s", "cpu_s"}; prints the floors it measures."""
    saved = os.environ.get("OPENBLAS_NUM_THREADS")
    import bench_gallery_floor as G  # sets OPENBLAS_NUM_THREADS for its own process: put back

    if saved is None:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)
    else:
        os.environ["OPENBLAS_NUM_THREADS"] = saved
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    floors: dict = {}
    setups: dict[tuple, float] = {}

    def setup_floor(d: int, k: int, draw: bool) -> float:
        if (d, k, draw) not in setups:
            # W holds numbers from the start (np.empty may hand back old memory: a subnormal or NaN
            # there would slow the products and raise the bound)
            W, Qt, M = rng.random((d, d)), rng.standard_normal((k, d)), np.empty((k, d))

            def setup() -> None:
                if draw:
                    rng.random(out=W)
                np.matmul(Qt, W, out=M)
                np.matmul(Qt, W, out=M)

            setups[(d, k, draw)] = G.per_call(setup, budget=0.05, reps=3)
        return setups[(d, k, draw)]

    out = {}
    with threadpool_limits(limits=1, user_api="blas"):
        for count in seeds:
            steps_s = setups_s = 0.0
            groups: dict[tuple, int] = {}
            for cfg in sweep_points(quick, count):
                for kind, size, steps in G.priced(cfg, cfg.T):
                    if (kind, size) not in floors:  # its fastest of three rounds
                        floors.update(G.measure_floors([(kind, size)], 3))
                    steps_s += steps * floors[(kind, size)]
                groups[(cfg.seed, cfg.d)] = cfg.n * cfg.T + 2
            top = {seed: max(d for s, d in groups if s == seed) for seed, _ in groups}
            for (seed, d), k in groups.items():
                setups_s += setup_floor(d, min(k, d), draw=d == top[seed])
            out[count] = {"steps_s": steps_s, "setups_s": setups_s, "cpu_s": steps_s + setups_s}
            print(f"lower bound, {count} seed(s) per cell: {steps_s:.1f} CPU s in the steps + {setups_s:.1f} "
                  f"in the setups = {steps_s + setups_s:.1f} CPU s", flush=True)  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--reference", type=Path, help="another checkout of attnsim to time side by side")
    ap.add_argument(
        "--quick", action="store_true", help="the figure's quick grid (a smoke test of this script)"
    )
    ap.add_argument("--plot", type=Path, help="where to write the plot (default: in the temporary folder)")
    ap.add_argument(
        "--seeds",
        type=int,
        default=10,
        help="the sweep once more with this many seeds per cell (the phase diagram's statistics; "
        "target 4 minutes at 10); 0: not",
    )
    ap.add_argument("--json", type=Path, help="also write the table as JSON here")
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
    inside: dict[str, list[float]] = {k: [] for k in contenders}
    numbers: dict[str, str] = {}
    for rep in range(args.reps):
        for name, checkout in contenders.items():
            wall, cpu, text, sim = run_figure(checkout, tmp / "run", args.quick)
            walls[name].append(wall)
            cpus[name].append(cpu)
            inside[name].append(sim / cpu)
            numbers[name] = text
            print(f"rep {rep + 1}: {name:14s} {wall:6.1f} s wall, {cpu:6.1f} s CPU, "
                  f"{100 * sim / cpu:.1f} % of it inside the simulations", flush=True)  # fmt: skip
    sweep_share = []
    for _ in range(args.reps):  # the sweep alone (no plot): the share SPEC §9 asks of a sweep
        wall, cpu, sim = run_sweep_only(HERE, tmp / "sweep", args.quick)
        sweep_share.append(sim / cpu)
        print(f"attnsim sweep alone: {wall:6.1f} s wall, {cpu:6.1f} s CPU, {100 * sim / cpu:.1f} % inside",
              flush=True)  # fmt: skip
    many = None
    if args.seeds:
        many = run_sweep_only(HERE, tmp / "sweep", args.quick, args.seeds)
        print(
            f"attnsim sweep, {args.seeds} seeds per cell: {many[0]:6.1f} s wall, {many[1]:6.1f} s CPU",
            flush=True,
        )
    bound = floor_bound(args.quick, [1] + ([args.seeds] if args.seeds else []))
    cores = os.cpu_count() or 1
    grid = "quick grid" if args.quick else "39 x 39 runs"
    print(f"\nloss heatmap from scratch ({grid}), {cores} cores; median (min-max) of {args.reps}")
    first = float(np.median(walls["this checkout"]))
    for name in contenders:
        w, c = walls[name], cpus[name]
        print(f"{name:14s} wall {np.median(w):6.1f} s ({min(w):.1f}-{max(w):.1f})   "
              f"CPU {np.median(c):6.1f} s ({min(c):.1f}-{max(c):.1f})   "
              f"{np.median(w) / first:.2f}x this checkout's wall   "
              f"{100 * np.median(inside[name]):.1f} % of the CPU inside the simulations")  # fmt: skip
    for count, b in bound.items():
        print(f"lower bound at the floors, {count} seed(s) per cell: {b['cpu_s']:.1f} CPU s, "
              f"{b['cpu_s'] / cores:.1f} s on {cores} cores")  # fmt: skip
    share = 100 * float(np.median(sweep_share))
    print(f"the sweep alone (attnsim sweep, no plot): {share:.1f} % of its CPU inside the simulations "
          f"({100 * min(sweep_share):.1f}-{100 * max(sweep_share):.1f})")  # fmt: skip
    if args.json:
        row = {"wall_s": float(np.median(walls["this checkout"])), "wall_min": min(walls["this checkout"]),
               "wall_max": max(walls["this checkout"]), "cpu_s": float(np.median(cpus["this checkout"])),
               "inside_figure": float(np.median(inside["this checkout"])),
               "inside_sweep": float(np.median(sweep_share)), "inside_sweep_min": min(sweep_share),
               "inside_sweep_max": max(sweep_share), "reps": args.reps, "grid": grid,
               "cores": os.cpu_count()}  # fmt: skip
        row.update(floor_cpu_s=bound[1]["cpu_s"], floor_steps_s=bound[1]["steps_s"],
                   floor_setups_s=bound[1]["setups_s"])  # fmt: skip
        if many is not None:
            row.update(seeds=args.seeds, seeds_wall_s=many[0], seeds_cpu_s=many[1],
                       seeds_floor_cpu_s=bound[args.seeds]["cpu_s"])  # fmt: skip
        args.json.write_text(json.dumps({"benchmark": "heatmap", "rows": {"fig3": row}}, indent=1))
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
    shutil.rmtree(tmp / "sweep", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
