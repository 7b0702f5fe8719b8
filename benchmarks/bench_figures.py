"""Every figure from an empty cache, profiled: where the minutes of ``python scripts/make_figures.py`` go.

Runs the figure command once (or ``--reps`` times) in a fresh process with an empty sweep
cache and the kernel cache warm (a quick run first loads or compiles every kernel,
untimed), then reads what each run recorded. Per figure: the CPU seconds of its
simulations (the records' ``cpu_s``, each worker's process time around its
``simulate`` call), of which the setups (``setup_s``) and the evaluations
(``evaluation_s``: population metrics and test sets), the longest single run (no
schedule can finish the figure's work sooner on these cores), and the seconds its
drawing took in the main process. A sweep that several figures read counts for the
first of them. In all: the wall seconds, the CPU seconds of every process (user +
system), and the idle core-seconds, cores x wall - CPU (a core waiting for work).

Prints the table and writes it as JSON (``--json``, what ``benchmarks/run_all.py``
reads). Target (SPEC §9): every figure from an empty cache in at most 10 minutes on
2 cores.

Usage::

    python benchmarks/bench_figures.py [--reps 1] [--json FILE] [--names heatmaps,delayed] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_figures(folder: Path, quick: bool, names: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of every process, the command's output) of one figure command from scratch."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    script = str(HERE / "scripts" / "make_figures.py")
    cmd = [sys.executable, script, *names, "--cache", str(folder / "cache"), "--outdir", str(folder / "out")]
    cmd += ["--quick"] if quick else []
    env = {**os.environ, "MPLBACKEND": "Agg"}
    cpu, t = children_cpu(), time.perf_counter()
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, cwd=HERE)
    return time.perf_counter() - t, children_cpu() - cpu, out.stdout


def profile(cache: Path, log: str, quick: bool, names: list[str]) -> dict[str, dict]:
    """Per figure: its runs' CPU seconds, setups, evaluations, longest run, drawing seconds."""
    import importlib

    sys.path.insert(0, str(HERE))
    from attnsim.cli_args import load_gallery  # this checkout's figures (scripts/gallery)

    NAMES = load_gallery().NAMES
    from attnsim.sweep import parse_sweep

    drawn = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\w+): .* \(([\d.]+) s\)$", log, re.M)}
    root = cache / ("quick" if quick else "full")
    counted: set[str] = set()
    rows = {}
    for name, module in NAMES.items():
        if names and name not in names:
            continue
        mod = importlib.import_module(f"gallery.{module}")
        sweeps = [parse_sweep(m).name for m in getattr(mod, "sweeps", lambda q: [])(quick)]
        recs = []
        for sweep in dict.fromkeys(sweeps):
            if sweep in counted:
                continue
            counted.add(sweep)
            recs += [json.loads(p.read_text()) for p in (root / sweep / "records").glob("*.json")]
        ok = [r for r in recs if r.get("status") == "ok"]
        rows[name] = {
            "runs": len(ok),
            "cpu_s": sum(r.get("cpu_s") or 0.0 for r in ok),
            "setup_s": sum(r.get("setup_s") or 0.0 for r in ok),
            "evaluation_s": sum(r.get("evaluation_s") or 0.0 for r in ok),
            "longest_s": max((r.get("cpu_s") or 0.0 for r in ok), default=0.0),
            "draw_s": drawn.get(name, 0.0),
        }
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument(
        "--quick", action="store_true", help="the figures' quick grids (a smoke test of this script)"
    )
    ap.add_argument("--names", default="", help="comma-separated figures (default: all)")
    ap.add_argument("--json", type=Path, help="also write the table as JSON here")
    args = ap.parse_args()
    names = [n for n in args.names.split(",") if n]
    tmp = Path(tempfile.mkdtemp(prefix="attnsim-bench-figures-"))
    run_figures(tmp / "warm", True, names)  # every kernel loaded (or compiled) once, untimed
    cores = os.cpu_count() or 1
    runs = []
    for rep in range(args.reps):
        wall, cpu, log = run_figures(tmp / "run", args.quick, names)
        rows = profile(tmp / "run" / "cache", log, args.quick, names)
        runs.append({"wall_s": wall, "cpu_s": cpu, "idle_core_s": cores * wall - cpu, "rows": rows})
        idle = cores * wall - cpu
        print(f"rep {rep + 1}: {wall:.1f} s wall, {cpu:.1f} s CPU, {idle:.1f} idle core-seconds", flush=True)
    best = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]  # the median run's table
    what = "quick grids" if args.quick else "full size"
    print(f"\nevery figure from an empty cache ({what}), {cores} cores; the median of {args.reps} run(s):")
    print(f"{'figure':22s} {'runs':>5s} {'CPU s':>8s} {'setup s':>8s} {'eval s':>8s} {'longest s':>9s} "
          f"{'draw s':>7s}")  # fmt: skip
    for name, r in best["rows"].items():
        print(f"{name:22s} {r['runs']:5d} {r['cpu_s']:8.1f} {r['setup_s']:8.1f} {r['evaluation_s']:8.1f} "
              f"{r['longest_s']:9.1f} {r['draw_s']:7.1f}")  # fmt: skip
    sims = sum(r["cpu_s"] for r in best["rows"].values())
    print(f"in all: {best['wall_s']:.1f} s wall, {best['cpu_s']:.1f} s CPU ({sims:.1f} in the simulations), "
          f"{best['idle_core_s']:.1f} idle core-seconds")  # fmt: skip
    if args.json:
        walls = [r["wall_s"] for r in runs]
        out = {"benchmark": "figures", "cores": cores, "quick": args.quick, "reps": args.reps,
               "wall_min": min(walls), "wall_max": max(walls), **best}  # fmt: skip
        args.json.write_text(json.dumps(out, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
