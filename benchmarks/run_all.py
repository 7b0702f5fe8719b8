"""Run every benchmark side by side with its peer and its floor, and write docs/performance.md.

Each benchmark runs in its own process with its thread settings pinned (each
script pins what it compares; OPENBLAS_NUM_THREADS is set for all of them),
writes its table as JSON and prints its own report; this script collects them
into the performance page: the machine (CPU, cores, memory and its measured
bandwidth, library versions, thread settings), one table per benchmark with
medians and their spread, the ratios against peers and floors measured in the
same run, and the plots. Every number on the page is in the JSON and the
printed report saved beside it (docs/perf/), with the command that made it.

Usage::

    pip install '.[bench]'              # the PyTorch peers (optional: without torch they are left out)
    python benchmarks/run_all.py        # about 20 minutes on 2 cores, and half an hour for the
                                        # test suite on two fresh clones (bench_suite.py)
    python benchmarks/run_all.py --quick  # fewer repetitions and sizes, no suite: a few minutes
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "benchmarks"
sys.path.insert(0, str(HERE))
import targets  # noqa: E402

# (name, script, full arguments, quick arguments); {perf} is the output folder
BENCHMARKS = [
    ("engines", "bench_engines.py",
     ["--reps", "3", "--plot", "{perf}/bench_scaling.png"],
     ["--reps", "1", "--part", "default,d", "--d-list", "500,2000,8000,100000", "--peer-max-d", "2000",
      "--dense-max-d", "2000", "--reduced-max-d", "8000", "--plot", "{perf}/bench_scaling.png"]),
    ("encoder", "bench_encoder.py",
     ["--reps", "3", "--steps", "30", "--plot", "{perf}/bench_encoder.png"],
     ["--reps", "2", "--steps", "10", "--d-list", "500,2000", "--fixed-reps", "2", "--plot",
      "{perf}/bench_encoder.png"]),
    ("floors", "bench_floors.py", ["--reps", "7", "--steps", "20000"], ["--reps", "3", "--steps", "5000"]),
    ("heatmap", "bench_heatmap.py", ["--reps", "2", "--plot", "{perf}/bench_heatmap.png"],
     ["--reps", "1", "--quick", "--plot", "{perf}/bench_heatmap.png"]),
    ("startup", "bench_startup.py", ["--reps", "7"], ["--reps", "3"]),
    ("figures", "bench_figures.py", ["--reps", "1"], ["--reps", "1", "--quick"]),
    ("gallery_floor", "bench_gallery_floor.py", ["--figures", "{perf}/figures.json"],
     ["--figures", "{perf}/figures.json"]),
    ("positional_semantic", "bench_positional_semantic.py",
     ["--reps", "7", "--steps", "20", "--d-list", "250,500,1000,2000", "--plot",
      "{perf}/bench_positional_semantic.png"],
     ["--reps", "3", "--steps", "10", "--d-list", "500,1000", "--plot",
      "{perf}/bench_positional_semantic.png"]),
    ("replica", "bench_replica.py", ["--reps", "3", "--scan", "--plot", "{perf}/bench_replica.png"],
     ["--reps", "1", "--plot", "{perf}/bench_replica.png"]),
    ("seeds", "bench_seeds.py", ["--seeds", "0-199", "--reps", "3", "--baseline", "70b8a38"],
     ["--seeds", "0-39", "--reps", "1", "--baseline", "70b8a38"]),
    ("sweep_store", "bench_sweep_store.py", ["--points", "100000", "--reps", "3"],
     ["--points", "5000", "--reps", "1"]),
    ("suite", "bench_suite.py", ["--baseline", "70b8a38", "--reps", "1", "--plot", "{perf}/bench_suite.png"],
     None),  # half an hour whatever the options: not in --quick
]  # fmt: skip

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def machine(threads: int) -> dict:
    """What the numbers were measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = math.nan
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) / 2**20
    except OSError:
        pass
    l3 = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")
    versions = {}
    for pkg in ("numpy", "scipy", "numba", "matplotlib", "threadpoolctl", "torch", "attnsim"):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = "not installed"
    git = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout.strip()  # fmt: skip
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem, 1),
        "l3": l3.read_text().strip() if l3.exists() else "unknown",
        "bandwidth": bandwidth(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "blas": blas_libraries(),
        "threads": threads,
        "bytecode_cache": "off (PYTHONDONTWRITEBYTECODE set)" if os.environ.get("PYTHONDONTWRITEBYTECODE")
        else "on",
        "git": git or "unknown",
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
    }  # fmt: skip


def bandwidth(mb: int = 512, reps: int = 5) -> dict:
    """Memory bandwidth on one core, GB/s (medians of ``reps``): reading an
    array of ``mb`` MB (its sum) and copying it (read + write counted)."""
    import numpy as np

    a = np.ones(mb * 2**20 // 8)
    b = np.empty_like(a)
    read, copy = [], []
    for _ in range(reps):
        t = time.perf_counter()
        a.sum()
        read.append(a.nbytes / (time.perf_counter() - t) / 1e9)
        t = time.perf_counter()
        np.copyto(b, a)
        copy.append(2 * a.nbytes / (time.perf_counter() - t) / 1e9)
    return {"read_gbs": float(np.median(read)), "copy_gbs": float(np.median(copy)), "array_mb": mb}


def blas_libraries() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", "import json, numpy, scipy.linalg, threadpoolctl; print(json.dumps("
         "[(i['filepath'].split('/')[-2], i['internal_api'], i.get('version')) "
         "for i in threadpoolctl.threadpool_info()]))"],
        capture_output=True, text=True,
    )  # fmt: skip
    try:
        return [f"{lib} {api} {ver}" for lib, api, ver in json.loads(out.stdout)]
    except ValueError:
        return []


def run(name: str, script: str, args: list[str], perf: Path, env: dict) -> tuple[dict | None, str, str]:
    """(its JSON, its printed report, the command) of one benchmark."""
    out = perf / f"{name}.json"
    cmd = [sys.executable, str(HERE / script), *[a.format(perf=perf) for a in args], "--json", str(out)]
    shown = " ".join(["python", f"benchmarks/{script}", *[a.format(perf="docs/perf") for a in args]])
    print(f"== {shown}", flush=True)
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    report = proc.stdout + (f"\n[stderr]\n{proc.stderr[-4000:]}" if proc.returncode else "")
    (perf / f"{name}.txt").write_text(report)
    print(proc.stdout, flush=True)
    if proc.returncode:
        print(
            f"{name}: failed (exit {proc.returncode}); its report is in {perf / (name + '.txt')}",
            file=sys.stderr,
        )
        return None, report, shown
    print(f"   ({time.perf_counter() - t:.0f} s)", flush=True)
    return json.loads(out.read_text()), report, shown


def ms(row: dict, k: str) -> str:
    return f"{row['ms'][k]:.1f} ({row['ms_min'][k]:.1f}–{row['ms_max'][k]:.1f})"


def times(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.2g}×" if x < 10 else f"{x:.0f}×"


def spread(v: float, lo: float, hi: float, fmt: str = ".3g") -> str:
    return f"{v:{fmt}} ({lo:{fmt}}–{hi:{fmt}})"


def section_engines(res: dict) -> list[str]:
    lines = ["| contender | seconds | of which setup | × official loop | × careful loop "
             "| × official loop, the run without its setup |", "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, r in res.get("default", {}).items():
        off, car = times(r["x_official"]), times(r["x_careful"])
        setup = r.get("setup_s", math.nan)
        setup = "—" if math.isnan(setup) else f"{setup:.3f}"
        bare = times(r.get("x_official_without_setup", math.nan))
        lines.append(f"| {name} | {spread(r['s'], r['min'], r['max'])} | {setup} | {off} | {car} | {bare} |")
    if res.get("d"):
        names = list(next(iter(res["d"].values())))
        lines += ["", "Seconds per 1000 steps against d (medians):", "",
                  "| d | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]  # fmt: skip
        for d, row in res["d"].items():
            cells = ["—" if math.isnan(row[n]) else f"{row[n]:.4g}" for n in names]
            lines.append(f"| {int(d):,} | " + " | ".join(cells) + " |")
    if res.get("steps"):
        lines += ["", "The reduced engine, default run, log-spaced logging:", "",
                  "| steps | seconds | µs per step |", "|---:|---:|---:|"]  # fmt: skip
        for steps, r in res["steps"].items():
            lines.append(
                f"| {int(steps):,} | {spread(r['s'], r['min'], r['max'])} | {r['s'] / int(steps) * 1e6:.1f} |"
            )
    return lines


def section_encoder(res: dict) -> list[str]:
    rows = res["rows"]
    torch = "torch32" in rows[0]["ms"]
    head = "| d = mlp_dim | attnsim (float64) | floor: nine BLAS passes | × floor | floor + W_q, W_k reads "
    head += "| × that |"
    sep = "|---:|---:|---:|---:|---:|---:|"
    if torch:
        head += " official loop, float32 | × | float64 | × |"
        sep += "---:|---:|---:|---:|"
    lines = [head, sep]
    for r in rows:
        line = (f"| {r['d']} | {ms(r, 'attnsim')} | {ms(r, 'floor')} | **{r['x_floor']:.2f}** "
                f"| {ms(r, 'floor_q')} "
                f"| {r['x_floor_q']:.2f} |")  # fmt: skip
        if torch:
            line += (
                f" {ms(r, 'torch32')} | {r['x_float32']:.1f} | {ms(r, 'torch64')} | {r['x_float64']:.1f} |"
            )
        lines.append(line)
    lines += ["", f"Milliseconds per GD step, n = {rows[0]['n']}, T = 8, median (min–max) over the "
              f"processes; BLAS threads in attnsim's step: {rows[0]['blas_threads_in_step']}. × floor is the "
              "median over alternating blocks (five steps, five floors, ...) of the step over the "
              "floor."]  # fmt: skip
    if all("parts_ms" in r for r in rows):
        lines += ["", "Where attnsim's step goes (ms; more steps with every BLAS call of the step timed, the "
                  "median over the processes): its nine passes against their floor, W_q's and W_k's four "
                  "matrix-vector passes with the held updates' corrections and their rank-32 products, and "
                  "the rest (the per-row kernels over tokens and samples, the loss, Python).", "",
                  "| d = mlp_dim | a step | in the nine passes | × their floor | W_q, W_k | the rest |",
                  "|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for r in rows:
            p = r["parts_ms"]
            x = p["nine"] / r["ms"]["floor"]
            lines.append(f"| {r['d']} | {p['step']:.2f} | {p['nine']:.2f} | {x:.2f} | {p['query']:.2f} "
                         f"| {p['rest']:.2f} |")  # fmt: skip
    if "fixed" in res:
        f = res["fixed"]
        lines += ["", f"An encoder run's cost beyond its steps (`--set model=encoder --set test_n=200`, d = "
                  f"{f['d']}: `elapsed_s` at {f['steps']} steps less {f['steps']} times the per-step slope "
                  f"to {3 * f['steps']}, paired fresh processes): **{f['fixed_s']:.2f} s** "
                  f"({f['fixed_min']:.2f}–{f['fixed_max']:.2f}, median of {f['reps']} pairs; "
                  f"{f['ms_per_step']:.1f} ms per step). Target: 0.3 s."]  # fmt: skip
    return lines


def section_positional_semantic(res: dict) -> list[str]:
    lines = ["| d | n | attnsim (float64) | floor: one pass | × floor | published torch loop, float32 | × "
             "| float64 | × |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in res["rows"]:
        lines.append(f"| {r['d']} | {r['n']} | {ms(r, 'attnsim')} | {ms(r, 'floor')} "
                     f"| **{r['x_floor']:.2f}** | {ms(r, 'torch32')} | {r['x_float32']:.1f} "
                     f"| {ms(r, 'torch64')} | {r['x_float64']:.1f} |")  # fmt: skip
    worst = {k: max(r["q_rel_diff"][k] for r in res["rows"]) for k in ("torch64", "torch32")}
    lines += ["", f"Milliseconds per GD step, T = 2, n = {res['alpha']:g} d, median (min–max) over the "
              f"repetitions; threads (BLAS, Numba, torch) {res['threads']}. × floor is the median over the "
              "repetitions of the step over the floor timed beside it. The same trajectory: after every "
              "timed step, max |Q_torch − Q_attnsim| / max |Q| is at most "
              f"{worst['torch64']:.1e} for the published loop in float64 and {worst['torch32']:.1e} in "
              "float32."]  # fmt: skip
    return lines


def section_replica(res: dict) -> list[str]:
    head, base = res.get("head", "this checkout"), res.get("baseline", "70b8a38")
    lines = [f"| fixed point | orders | {head}, s | {base}, s | × | answers differ by |",
             "|---|---|---:|---:|---:|---|"]  # fmt: skip
    for r in res["rows"]:
        a = spread(r["head_s"], r["head_min"], r["head_max"])
        b = spread(r["base_s"], r["base_min"], r["base_max"])
        orders = r["orders"] + ("" if r["converged"] else " (not resolved)")
        lines.append(f"| {r['case']} | {orders} | {a} | {b} | {times(r['base_s'] / r['head_s'])} "
                     f"| {r['same']} |")  # fmt: skip
    lines += ["", f"Seconds per `replica.solve` from scratch, median (min–max) over {res['reps']} "
              f"interleaved repetitions; threads {res['threads']}."]  # fmt: skip
    scan = res.get("scan") or []
    if scan:
        ok = sorted(r["s"] for r in scan if r["converged"])
        bad = [r for r in scan if not r["converged"]]
        lines += ["", f"The published grid ({len(scan)} points: ω 0, 0.1, 0.3, 0.5; both teacher matrices "
                  f"(one teacher at ω = 0); α 0.1–3; semantic and positional), {head} alone: "
                  f"{len(ok)} resolved, the slowest in {ok[-1]:.2f} s, the median in "
                  f"{statistics.median(ok):.2f} s."]  # fmt: skip
        if bad:

            def why(r):  # orders that still disagree, or no fixed point reached at the first order
                return f"{r['s']:.1f} s" + ("" if r["orders"] else ", no fixed point at order 8")

            lines += ["", "Not resolved (Gauss–Hermite orders 8, 12, 16, 24 still disagree by more than "
                      "int_tol, or no fixed point reached; solve() says which and gives no numbers): "
                      + "; ".join(f"ω {r['omega']} {r['teacher']} α {r['alpha']} {r['branch']} ({why(r)})"
                                  for r in bad) + "."]  # fmt: skip
    return lines


def section_suite(res: dict) -> list[str]:
    lines = ["| revision | `bash .ci/run`, s | pytest, s | of which compiling before the tests, s | tests |",
             "|---|---:|---:|---:|---|"]  # fmt: skip
    for label, r in res["rows"].items():
        whole = r["pytest_s"] + r["compile_first_s"]
        lines.append(f"| {label} | {spread(r['s'], r['min'], r['max'], '.0f')} | {whole:.0f} | "
                     f"{r['compile_first_s']:.0f} | {r['summary']} |")  # fmt: skip
    lines += ["", f"This checkout over revision {res['baseline']}: **{res['ratio']:.2f}×** the time "
              f"({res['reps']} run(s) each, one after the other, {res['cores']} cores)."]  # fmt: skip
    return lines


def section_floors(res: dict) -> list[str]:
    lines = ["| loop | attnsim, µs | floor, µs | × floor |", "|---|---:|---:|---:|"]
    for name, r in res["rows"].items():
        a = spread(r["us"], r["us_min"], r["us_max"], ".1f")
        b = spread(r["floor_us"], r["floor_min"], r["floor_max"], ".1f")
        lines.append(f"| {name} | {a} | {b} | **{r['x_floor']:.2f}** |")
    lines += ["", f"The default problem (k = {res['k']}, r = {res['r']}, n T = {res['tokens']}), "
              "BLAS threads "
              f"{res['threads']}, per call, median (min–max) over alternating blocks."]  # fmt: skip
    return lines


def section_heatmap(res: dict) -> list[str]:
    r = res["rows"]["fig3"]
    return [
        "| | |", "|---|---:|",
        f"| wall seconds, `attnsim figures heatmaps` from scratch ({r['grid']}) | "
        f"{spread(r['wall_s'], r['wall_min'], r['wall_max'], '.1f')} |",
        f"| CPU seconds (every process) | {r['cpu_s']:.1f} |",
        "| share of the CPU inside the simulations, `attnsim sweep` alone | "
        f"**{100 * r['inside_sweep']:.1f} %** "
        f"({100 * r['inside_sweep_min']:.1f}–{100 * r['inside_sweep_max']:.1f}) |",
        f"| the same, the figure command (its plot included) | {100 * r['inside_figure']:.1f} % |",
        *([f"| lower bound at the floors (steps and setups, no code can do less): CPU seconds, and wall "
           f"seconds on {r['cores']} cores | ≥ {r['floor_cpu_s']:.1f}, "
           f"≥ **{r['floor_cpu_s'] / r['cores']:.1f}** (target 25) |"] if "floor_cpu_s" in r else []),
        *([f"| wall seconds, `attnsim sweep` of the grid with {r['seeds']} seeds per cell (target: 4 min) | "
           f"**{r['seeds_wall_s']:.1f}** ({r['seeds_cpu_s']:.1f} s CPU) |"] if "seeds" in r else []),
        *([f"| its lower bound at the floors: CPU seconds, and wall seconds on {r['cores']} cores | "
           f"≥ {r['seeds_floor_cpu_s']:.1f}, ≥ **{r['seeds_floor_cpu_s'] / r['cores']:.1f}** (target 240) |"]
          if "seeds_floor_cpu_s" in r else []),
    ]  # fmt: skip


def section_figures(res: dict) -> list[str]:
    lines = ["| figure | runs | CPU s in its runs | of which setups | of which evaluations | longest run, s "
             "| drawing, s |", "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    rows = res["rows"]
    for name, r in rows.items():
        cells = (r["cpu_s"], r["setup_s"], r["evaluation_s"], r["longest_s"], r["draw_s"])
        lines.append(f"| {name} | {r['runs']} | " + " | ".join(f"{v:.1f}" for v in cells) + " |")
    sims = sum(r["cpu_s"] for r in rows.values())
    draws = sum(r["draw_s"] for r in rows.values())
    what = "the quick grids" if res.get("quick") else "full size"
    lines += ["", "| | |", "|---|---:|",
              f"| wall seconds, `python scripts/make_figures.py` from an empty cache ({what}) | "
              f"**{res['wall_s']:.1f}** ({res['wall_s'] / 60:.1f} min) |",
              f"| CPU seconds, every process | {res['cpu_s']:.1f} |",
              f"| of which inside the runs (the records' `cpu_s`) | {sims:.1f} |",
              f"| drawing (the main process, beside the workers) | {draws:.1f} |",
              f"| idle core-seconds ({res['cores']} x wall - CPU) | {res['idle_core_s']:.1f} |"]  # fmt: skip
    return lines


def section_gallery_floor(res: dict) -> list[str]:
    lines = ["| figure | runs | priced at a floor | CPU s at the floors (lower bound) | CPU s measured | × |",
             "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, r in res["rows"].items():
        if not r["runs"]:
            continue
        got = r["measured_cpu_s"]
        x = f"{got / r['floor_s']:.2f}" if got and r["floor_s"] and r["bounded"] == r["runs"] else ""
        shown = "" if got is None else f"{got:.1f}"
        lines.append(f"| {name} | {r['runs']} | {r['bounded']} | {r['floor_s']:.1f} | {shown} | {x} |")
    total = res["floor_s"]
    lines += ["", f"In all: **at least {total:.0f} CPU s** at the floors, that is at least "
              f"{total / 120:.1f} minutes on 2 cores (the target's 10 minutes are 1200 CPU s); the "
              f"runs measured {res['measured_cpu_s']:.0f}. The floors per step, in µs, the fastest of three "
              "rounds that visit every floor in turn, each the fastest of 15 blocks (one window of a second "
              "or two can be slow throughout; a lower bound must come from the quiet ones): "
              + "; ".join(f"{k}: {v:.4g}" for k, v in res["floors_us"].items()) + "."]  # fmt: skip
    return lines


def section_startup(res: dict) -> list[str]:
    lines = ["| | seconds | × floor |", "|---|---:|---:|"]
    for name, r in res["rows"].items():
        x = f"{r['x_floor']:.2f}" if "x_floor" in r else ""
        lines.append(f"| {name} | {spread(r['s'], r['min'], r['max'])} | {x} |")
    lines += ["", f"Median (min–max) of {res['reps']} rounds after a warm-up round; bytecode caches "
              f"{res['bytecode_cache']}."]  # fmt: skip
    return lines


def section_seeds(res: dict) -> list[str]:
    lines = ["| | seconds | × the last row |", "|---|---:|---:|"]
    last = res["rows"][res["baseline"]]["s"]
    for name, r in res["rows"].items():
        lines.append(f"| {name} | {spread(r['s'], r['min'], r['max'])} | {last / r['s']:.2f}× |")
    lines += ["", f"`attnsim run --seeds {res['seeds']}` of the default experiment, the whole command; "
              f"median (min–max) of {res['reps']} interleaved rounds after a warm-up; {res['cores']} cores, "
              f"OPENBLAS_NUM_THREADS={res['threads']}."]  # fmt: skip
    f = res.get("floor")
    if f:
        from attnsim.experiments.seeds import parse_seeds  # lazy: the page's other sections need no attnsim

        n = len(parse_seeds(res["seeds"]))
        bound = n * f["per_seed_s"] / res["cores"]
        ms = {k: f"{1e3 * v:.1f} ms" for k, v in f.items() if k.endswith("_s")}
        lines += ["", f"The floor of one seed, one core (medians): W(0)'s d² draws, the token noise and the "
                  f"two d × d × k products of the setup {ms['setup_s']}, the run's and its twin's "
                  f"{f['sizes']['steps']} GD steps at the reduced step's floor {ms['steps_s']}, "
                  f"{f['sizes']['evaluations']} population evaluations at theirs {ms['evaluations_s']}: "
                  f"{ms['per_seed_s']}. {n} seeds on {res['cores']} cores take at least "
                  f"{bound:.1f} s, at most **{res['rows'][res['baseline']]['s'] / bound:.2f}×** the last row "
                  "whatever the code."]  # fmt: skip
        mine = res["rows"]["this checkout (workers: default)"]["s"]
        per_seed = res["cores"] * mine / n
        lines += ["", "The seeds run side by side on the cores (each seed's result as alone). A seed's "
                  "result is its own W(0), drawn in d dimensions and projected twice onto the reduced "
                  f"engine's bases: these d² passes alone are {ms['setup_s']} a seed on one core (the bases, "
                  "the tail estimator's design search, the records and the start-up count 0 in the bound). "
                  "Batching the seeds' small reduced problems in one kernel would touch the steps' "
                  f"{ms['steps_s']} only, not the setup. A seed costs {per_seed:.2f} CPU seconds here "
                  f"({mine:.1f} s on {res['cores']} cores), {per_seed / f['per_seed_s']:.1f}× its "
                  "floor."]  # fmt: skip
    return lines


def section_sweep_store(res: dict) -> list[str]:
    return [
        "| | |", "|---|---|",
        f"| points (10-step runs) | {res['points']} on {res['workers']} workers |",
        f"| killed (SIGKILL, the process group) after | {res['killed_s']:.0f} s, {res['kept']} records "
        "kept |",
        f"| resumed | {res['resumed_s']:.0f} s: {res['ok']} ok, {res['failed']} failed, {res['computed']} "
        f"computed (the {res['expected']} missing) |",
        f"| files left in records/ | {len(res['files'])}: {', '.join(res['files'])} |",
        f"| `load_sweep` (its kept table) | {spread(res['load_s'], res['load_min'], res['load_max'])} s, "
        f"{res['rows']} rows; median of {res['reps']} fresh processes |",
        f"| `load_sweep` from the packed records | {res['load_records_s']:.3g} s |",
        "",
        "The packed records are read only when the kept table is stale (a sweep killed and not run again, "
        "or another sweep writing in the folder): then every point is validated again and every record "
        f"parsed and verified, {res['load_records_s']:.0f} s at {res['points']} points.",
    ]  # fmt: skip


SECTIONS = {
    "engines": ("The default run and d from 500 to 10⁶",
                "attnsim's `elapsed_s` (data, setup, training and every metric, the clean-label twin "
                "included; compilation and start-up excluded; every run builds its setup afresh) against the "
                "paper's PyTorch loop as published (float32, `(x @ W) @ p`, `torch.optim.SGD`) and in its "
                "careful form `x @ (W @ p)`, on the same data and W(0). The loops are timed without their "
                "setup (data and W(0) made before the clock starts); the last column compares them with the "
                "run without its `setup_s` (the median of each repetition's difference).",
                section_engines, "bench_scaling.png"),
    "encoder": ("The encoder's GD step against its floor",
                "One GD step of the one-layer encoder's CLS path (float64) against its floor timed in the "
                "same process at the same thread settings: the nine BLAS passes a step cannot avoid over the "
                "three "
                "d × d matrices that see all n samples (the forward products of W_v, W1, W2, their "
                "back-propagation and their in-place rank-n updates, SciPy's dgemm), and those plus the four "
                "matrix-vector passes over W_q and W_k; beside it the official encoder loop (every position, "
                "autograd) in float32 and float64. Target (SPEC §9): ≤ 1.3× the floor at d = 2000.",
                section_encoder, "bench_encoder.png"),
    "floors": ("Every hot loop against its floor",
               "Each loop against bare loops doing only the passes over its arrays that it cannot avoid "
               "(`benchmarks/floor_kernels.py`: same numerics, float64, no fastmath). Target (SPEC §9): the "
               "reduced GD step ≤ 1.5× its floor.",
               section_floors, None),
    "heatmap": ("The 39 × 39 heatmap (figure 3) from scratch",
                "1521 runs of 1000 steps, their clean-label twins and 39 setups on the local workers; the "
                "share "
                "of CPU seconds inside the simulations is the records' `cpu_s` over the CPU seconds of every "
                "process (target, SPEC §9: ≥ 90 % for a sweep). The lower bounds price every run and its "
                "twin at the attention model's GD floor (one BLAS thread, as in a worker) and every setup at "
                "W(0)'s draws (once per seed) and its two products with the k-column bases (4 d² k flops); "
                "bases, evaluations, records, start-up and the plot count 0.",
                section_heatmap, "bench_heatmap.png"),
    "figures": ("Every figure from an empty cache",
                "`python scripts/make_figures.py` in a fresh process with an empty sweep cache (the "
                "kernel cache warm): the sweeps of every figure run together on one worker per core, "
                "the costliest tasks first, and each figure is drawn as soon as its own are done. Per "
                "figure, the CPU seconds of its runs (each worker's process time around its simulation), "
                "of which the setups and the evaluations (population metrics, test sets), its longest "
                "run (no schedule finishes the figure sooner) and its drawing; a sweep two figures read "
                "counts for the first. Target (SPEC §9): 10 minutes on 2 cores.",
                section_figures, None),
    "gallery_floor": ("The gallery at its floors",
                      "A lower bound of the CPU seconds every figure needs, whatever the code: each run of "
                      "`python scripts/make_figures.py` (read from the figures' sweep specs, nothing run) "
                      "whose step has a floor in `benchmarks/` is priced at that floor, measured alone with "
                      "one BLAS thread, times its steps (a clean-label twin doubles them): the encoder's "
                      "nine BLAS passes and the query's four, the attention model's W or X W form where "
                      "its arrays stay in cache, a float32 twin's two passes over its W. Everything else "
                      "(gradient flow, AdamW's exact runs, bfloat16 twins, out-of-cache steps, setups, "
                      "evaluations, drawing) counts 0. The measured CPU seconds are the previous section's; "
                      "×, measured over the bound, where every run of the figure is priced.",
                      section_gallery_floor, None),
    "startup": ("Whole-process latency",
                "`attnsim --version` and a fresh `attnsim run` against the floor of any Numba + SciPy tool "
                "(`python -c \"import numba, scipy.special, scipy.linalg\"`), with the kernel cache warm.",
                section_startup, None),
    "positional_semantic": ("Positional and semantic attention: a GD step, its floor and the published loop",
                            "One GD step of Cui et al.'s model (float64: the fused pass over the tokens and "
                            "the plug-in optimizer's step) against the one pass over the (n T × d) token "
                            "matrix a step cannot avoid (`benchmarks/floor_kernels.py` `token_pass_floor`), "
                            "and against the published training loop (their `AttentionModel`, `quadloss`, "
                            "autograd, `torch.optim.SGD` with weight decay) in float32 (as published, here "
                            "on the CPU) and float64, on the same data and Q(0). Targets: ≤ 1.5× the floor, "
                            "faster than the published loop.",
                            section_positional_semantic, "bench_positional_semantic.png"),
    "replica": ("The replica theory's fixed points",
                "`replica.solve` (Gauss–Hermite orders raised until the answer stops moving) against "
                "revision 70b8a38's (its vectorized NumPy proximal map from every start at every "
                "iteration; unpacked from git and run by a worker process, interleaved), on the published "
                "settings, then this checkout alone on the whole published grid. Target: every fixed point "
                "≤ 1 s on one core, ≥ 10× faster than 70b8a38.",
                section_replica, "bench_replica.png"),
    "seeds": ("Many seeds: attnsim run --seeds",
              "The default experiment over 200 seeds, the whole command as a user runs it: this checkout on "
              "its worker processes (the default), with --workers 1, and revision 70b8a38 (a temporary "
              "worktree). Target: ≥ 4× 70b8a38.",
              section_seeds, None),
    "suite": ("The test suite on a fresh clone",
              "`bash .ci/run` (what CI runs: a fresh virtualenv, the install, the linters, pytest with "
              "Numba's cache cold) in a fresh clone of this revision and of revision 70b8a38, one after "
              "the other on this machine. pytest's seconds include the kernels compiled before the tests "
              "start (tests/conftest.py). Target: ≤ half of 70b8a38's time.",
              section_suite, "bench_suite.png"),
    "sweep_store": ("A sweep of 100 000 points",
                    "100 000 runs of 10 steps through `attnsim sweep`, killed once, resumed, then read back "
                    "with `load_sweep` in fresh processes. Target: completes, resumes without recomputing, "
                    "`load_sweep` ≤ 10 s.",
                    section_sweep_store, None),
}  # fmt: skip

WHY = """## Why it is fast

- **Reduced coordinates.** Gradient descent never leaves span{tokens, ν, μ±}
  on the query side and span{W(0)ᵀQ, p(0)} on the key side, so the default
  engine steps a k × r matrix with k ≈ nT + 2 whatever d is, exactly
  ([Engines](engines.md)); the implicit engine never forms anything of size d.
- **The X W form.** When log points are far apart, the step keeps B = X W and
  K = X Xᵀ instead of W: the outputs come from B p, and W is rebuilt only when
  a caller asks for it. With W fixed and generated tokens B is triangular
  beside the two signal columns, and a step reads only its nonzero half.
- **Kernels.** One fused pass over W per step (Wᵀg and the rank-one update
  together), the tokens in blocks that stay in cache; population terms in SIMD
  loops of arithmetic only, fed by NumPy's vectorized exp.
- **The encoder** computes the CLS path only (14.7× fewer multiply-adds than
  every position), every product on one BLAS library with both cores, the data
  tokens normalized once, no token-sized array per step, each weight matrix
  updated right after its last read, and W_q's and W_k's rank-one updates held
  and applied 32 at a time ([Encoder](encoder.md)).
- **Overlap.** Population metrics run on the second core while the steps go
  on; the run's clean-label and precision twins train beside it on a thread
  of their own (in a sweep worker, one process per core, after it). While a
  twin steps, the evaluations wait rather than make three threads take turns
  on two cores (and on the GIL); the evaluations are computed on the
  background thread alone, in the order they were queued.
- **Start-up.** `attnsim --version` imports nothing numerical; every kernel
  loads through Numba's public interface ([Design](design.md#numba)), which
  refreshes Numba's compiler before a process's first load: 0.1–0.3 s that a
  patch of Numba's cache saved until December 2026. The start-up targets
  (`attnsim run` within 1.5× the import floor, a fresh run's `elapsed_s`
  within 0.12 s) are retired: start-up is bought with public APIs only.
- **Sweeps.** Points that share d and seed share the reduced setup and the
  draws of W(0); workers are long-lived processes that load the kernels once.
- **Figures.** `attnsim figures` queues every figure's sweeps together on one
  worker per core, the costliest tasks first whichever figure they belong to,
  and draws each figure as soon as its own sweeps are done; figures whose runs
  were serial in the drawing process (15, 17, 18) run as sweeps too.
- **No dispatch in the flow's field.** The flow's vector field, called thousands
  of times with the same argument types, goes straight to its compiled
  function after the first call; typing a namedtuple of a dozen arrays cost
  Numba's dispatch 2.6 µs a call.
- **Gradient flow** integrates the same dynamics to 10¹⁴ steps in seconds:
  its cost follows the solver's steps, not the number of GD steps.
"""


def page(info: dict, results: dict, quick: bool) -> str:
    bw = info["bandwidth"]
    out = [
        "# Performance",
        "",
        "<!-- written by `python benchmarks/run_all.py`; edit that script, not this page -->",
        "",
        "Every number here was measured by the benchmarks in `benchmarks/`, run by",
        f"`python benchmarks/run_all.py{' --quick' if quick else ''}` on the machine below (each",
        "section says when and at which revision): each against its",
        "peer (the paper's PyTorch loops) or its own floor, side by side, with the thread settings stated.",
        "These machines are shared, so only ratios measured in the same run mean much; medians are given",
        "with their spread. The JSON and the printed report of each benchmark are in",
        "[docs/perf/](perf/), with the command that made them.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {info['cpu']}, {info['cores']} cores, L3 {info['l3']} |",
        f"| memory | {info['memory_gib']} GiB; one core reads {bw['read_gbs']:.1f} GB/s and copies "
        f"{bw['copy_gbs']:.1f} GB/s (read + write), {bw['array_mb']} MB arrays |",
        f"| Python | {info['python']} ({info['platform']}) |",
        "| libraries | " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()) + " |",
        "| BLAS | " + "; ".join(info["blas"]) + " |",
        f"| threads | OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = {info['threads']} for every benchmark (each "
        "script pins what it compares and says so); bytecode caches " + info["bytecode_cache"] + " |",
        f"| machine measured at | {info['git']}, {info['date']} (each section says when it ran) |",
        "",
    ]  # fmt: skip
    out += ["## Targets", "",
            "Each performance target a benchmark measures, against its latest measurement below "
            "(`benchmarks/targets.py` reads the benchmarks' JSON): met or not, and, where a benchmark "
            "measures one, the bound no code can beat with the work the target asks for (seconds: a lower "
            "bound; a speed-up: an upper one).", "",
            *targets.section({k: v["json"] for k, v in results.items()},
                             {k: v[0] for k, v in SECTIONS.items()}), ""]  # fmt: skip
    for name, (title, what, fn, plot) in SECTIONS.items():
        res = results.get(name)
        out += [f"## {title}", "", what, ""]
        if res is None:
            out += [
                "(not measured: the benchmark failed or has not run; its report, if any, is in docs/perf/.)",
                "",
            ]
            continue
        when = res["json"].get("run")
        source = f"Command: `{res['command']}`; report: [perf/{name}.txt](perf/{name}.txt)"
        source += f"; measured {when['date']} at {when['git']}." if when else "."
        note = res["json"].get("note")  # what the numbers alone do not say (set by hand in the JSON)
        out += [*fn(res["json"]), "", *([note, ""] if note else []), source, ""]
        if plot and (ROOT / "docs" / "perf" / plot).exists():
            out += [f"![{name}](perf/{plot})", ""]
    out.append(WHY)
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and sizes (a few minutes)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--only",
        help="comma-separated benchmarks to run again; the page keeps the others' "
        "last results from docs/perf/, each section saying which run it comes from",
    )
    ap.add_argument(
        "--page", action="store_true", help="write the page from docs/perf/ without running anything"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "performance.md")
    args = ap.parse_args()
    perf = args.out.parent / "perf"
    perf.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    for var in THREAD_VARIABLES[:3]:
        env[var] = str(args.threads)
    if args.page:  # the page again from what docs/perf/ holds, nothing run
        info = json.loads((perf / "machine.json").read_text())
        only = set()
    else:
        info = machine(args.threads)
        (perf / "machine.json").write_text(json.dumps(info, indent=1))
        only = set(args.only.split(",")) if args.only else None
    results = {}
    for name, script, full, quick in BENCHMARKS:
        if only is not None and name not in only:
            continue
        if args.quick and quick is None:  # no quick form: kept as last measured
            continue
        data, _, shown = run(name, script, quick if args.quick else full, perf, env)
        if data is not None:
            data["run"] = {"date": info["date"], "git": info["git"], "quick": args.quick, "command": shown}
            (perf / f"{name}.json").write_text(json.dumps(data, indent=1))
            results[name] = {"json": data, "command": shown}
    for name, *_ in BENCHMARKS:  # with --only: the others as last measured
        old = perf / f"{name}.json"
        if name not in results and old.exists():
            data = json.loads(old.read_text())
            if "run" in data:
                results[name] = {"json": data, "command": data["run"]["command"]}
    tmp = args.out.with_suffix(".md.tmp")
    tmp.write_text(page(info, results, args.quick))
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")
    wanted = [
        n
        for n, _, _, quick in BENCHMARKS
        if (only is None or n in only) and not (args.quick and quick is None)
    ]
    return 0 if all(name in results for name in wanted) else 1


if __name__ == "__main__":
    sys.exit(main())
