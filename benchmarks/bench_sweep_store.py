"""A sweep of many small points: it completes, resumes after being killed, leaves a few files, and
``load_sweep`` reads it back in seconds (attnsim/sweep/packs.py).

The sweep: ``--points`` runs of 10 steps (n 6, T 4, d 40, 128 population points; 100 signal norms
x points/100 seeds) on ``--workers`` local workers, through the command line as a user runs it.
It is killed (SIGKILL, the whole process group) once ``--kill-at`` of its records are packed,
then run again to the end. Then ``load_sweep`` is timed in fresh processes (its kept table, and
once from the packed records themselves):

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_sweep_store.py [--points 100000] [--workers 2]
        [--out DIR] [--plot F.png] [--json F.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SWEEP = """[sweep]
name = "store"
seeds = {seeds}
[base]
n = 6
T = 4
d = 40
steps = 10
log_every = 5
pop_points = 128
pop_log_points = 2
[grid]
signal_norm = {{start = 1.0, stop = 100.0, num = 100}}
"""

LOAD = """
import sys, time
t = time.perf_counter()
import attnsim
table = attnsim.load_sweep(sys.argv[1])
print(time.perf_counter() - t, len(table["status"]))
"""


def held(records: Path) -> int:
    """Records in the folder now: single files and packed lines."""
    n = len(list(records.glob("*.json")))
    for pack in records.glob("pack-*.jsonl"):
        with open(pack, "rb") as fh:
            n += sum(1 for _ in fh)
    return n


def sweep(path: Path, out: Path, workers: int, **kw) -> subprocess.Popen:
    cli = "import sys; from attnsim.cli import main; sys.exit(main())"  # the attnsim command
    cmd = [sys.executable, "-c", cli, "sweep", str(path), "--out", str(out), "--workers", str(workers)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, **kw)


def load_time(root: Path) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", LOAD, str(root)], capture_output=True, text=True, check=True)
    seconds, rows = out.stdout.split()
    return float(seconds), int(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=100_000, help="a multiple of 100")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--kill-at", type=float, default=0.3, help="share of the records packed when killed")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", help="the sweep's folder (default: a temporary one, removed)")
    ap.add_argument("--plot", help="write a bar chart of the times")
    ap.add_argument("--json", default="", help="write the measurements here")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    tmp = tempfile.TemporaryDirectory() if args.out is None else None
    out = Path(args.out or tmp.name)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "store.toml"
    path.write_text(SWEEP.format(seeds=args.points // 100))
    records = out / "store" / "records"

    t0 = time.perf_counter()
    proc = sweep(path, out, args.workers, start_new_session=True)
    while proc.poll() is None:
        time.sleep(2.0)
        packed = sum(1 for _ in records.glob("pack-*.jsonl")) if records.exists() else 0
        if packed * 1000 >= args.kill_at * args.points:
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    first = time.perf_counter() - t0
    before = held(records)
    t1 = time.perf_counter()
    text = sweep(path, out, args.workers).communicate()[0]
    second = time.perf_counter() - t1
    m = re.search(r"(\d+) of (\d+) records .*\((\d+) computed now\); (\d+) failed", text)
    files = sorted(os.listdir(records))
    loads = [load_time(out / "store") for _ in range(args.reps)]
    table = next(records.glob("pack-*.table"))
    table.rename(table.with_suffix(".kept"))
    raw = load_time(out / "store")
    table.with_suffix(".kept").rename(table)

    rows = [
        ("points", f"{args.points}"),
        ("killed after (s)", f"{first:.0f}, with {before} records kept"),
        ("resumed run (s)", f"{second:.0f}: {m[1] if m else '?'} of {m[2] if m else '?'} records, "
         f"{m[3] if m else '?'} computed now (expected {args.points - before}), {m[4] if m else '?'} failed"),
        ("files in records/", f"{len(files)}: {', '.join(files[:4])}"),
        ("load_sweep, kept table (s)", f"{statistics.median(t for t, _ in loads):.2f} median of {args.reps} "
         f"({min(t for t, _ in loads):.2f}-{max(t for t, _ in loads):.2f}), {loads[0][1]} rows"),
        ("load_sweep, packed records (s)", f"{raw[0]:.2f}, {raw[1]} rows"),
    ]  # fmt: skip
    if args.json:
        kept = [t for t, _ in loads]
        data = {
            "points": args.points, "workers": args.workers, "killed_s": first, "kept": before,
            "resumed_s": second, "computed": int(m[3]) if m else None, "expected": args.points - before,
            "ok": int(m[1]) if m else None, "failed": int(m[4]) if m else None, "files": files,
            "load_s": statistics.median(kept), "load_min": min(kept), "load_max": max(kept),
            "reps": args.reps,
            "load_records_s": raw[0], "rows": loads[0][1], "threads": os.environ["OPENBLAS_NUM_THREADS"],
        }  # fmt: skip
        with open(args.json, "w") as fh:
            json.dump(data, fh)
    width = max(len(r[0]) for r in rows)
    print(f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}, {args.workers} workers")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3))
        ax.barh(
            ["load_sweep\n(kept table)", "load_sweep\n(packed records)"],
            [statistics.median(t for t, _ in loads), raw[0]],
        )
        ax.axvline(10.0, color="k", ls="--", lw=1, label="target 10 s")
        ax.set_xlabel(f"seconds to read {args.points} records")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"wrote {args.plot}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
