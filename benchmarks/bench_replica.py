"""The replica theory's fixed points: this checkout's ``replica.solve`` against an older revision's
(70b8a38 by default: the vectorized NumPy proximal map, every start at every iteration), side by
side, interleaved, in two processes pinned to one thread each, on the published settings (sigma =
0.5, lambda = 0.01; omega 0-0.5, alpha 0.1-3, both teacher matrices, the three branches), each
solve() from scratch (Gauss-Hermite orders raised until the answer stops moving), median of the
repetitions. ``--scan`` also times this checkout alone on the whole published grid (omega 0, 0.1,
0.3, 0.5; both teacher matrices; alpha 0.1-3; semantic and positional), where some points are
not resolved by the rule at any order it tries (the answer says so, and what it cost is timed);
``--paths`` solves each resolved point again along the untracked path (``track=False``, the
iteration 70b8a38 ran) and says where the two answers differ:

    OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python benchmarks/bench_replica.py [--baseline 70b8a38]
        [--reps 3] [--scan [--paths]] [--plot F.png] [--json F.json]

The older revision's package is unpacked from git (``git archive``) into a temporary directory and
imported there by a worker process (it prints where it imported it from).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

import numpy as np

from attnsim.models.positional_semantic import replica as R

ROOT = Path(__file__).resolve().parent.parent
A2 = ((0.8, 0.2), (0.3, 0.7))
# (label, settings, branch): the published block's corners and middle
CASES = [
    ("semantic, omega 0.3, alpha 1.5", {"alpha": 1.5, "omega": 0.3}, "semantic"),
    ("positional, omega 0.3, alpha 1.5", {"alpha": 1.5, "omega": 0.3}, "positional"),
    ("semantic, omega 0.3, alpha 0.1", {"alpha": 0.1, "omega": 0.3}, "semantic"),
    ("semantic, omega 0.5, alpha 3", {"alpha": 3.0, "omega": 0.5}, "semantic"),
    ("positional, omega 0.1, alpha 0.6", {"alpha": 0.6, "omega": 0.1}, "positional"),
    ("agnostic, omega 0.3, alpha 1", {"alpha": 1.0, "omega": 0.3}, "agnostic"),
    ("semantic, A = [[0.8, 0.2], [0.3, 0.7]], alpha 2", {"alpha": 2.0, "teacher_A": A2}, "semantic"),
]
GRID_OMEGA = (0.0, 0.1, 0.3, 0.5)
GRID_ALPHA = (0.1, 0.3, 0.6, 1.0, 1.5, 2.0, 3.0)
KEYS = ("q", "m", "V", "theta", "mse", "Phi")

WORKER = f"""
import json, sys, time
from attnsim.models.positional_semantic import replica as R
print(json.dumps({{"file": R.__file__}}), flush=True)
for line in sys.stdin:
    job = json.loads(line)
    s = R.Settings(**job["settings"])
    t = time.perf_counter()
    sol = R.solve(s, job["branch"])
    dt = time.perf_counter() - t
    out = {{k: getattr(sol, k) for k in {KEYS!r}}}
    out.update(s=dt, converged=sol.converged, orders=[h[0] for h in sol.history])
    print(json.dumps(out), flush=True)
"""


def solve_here(settings: dict, branch: str, **kw) -> dict:
    t = time.perf_counter()
    sol = R.solve(R.Settings(**settings), branch, **kw)
    dt = time.perf_counter() - t
    out = {k: getattr(sol, k) for k in KEYS}
    return dict(out, s=dt, converged=sol.converged, orders=[h[0] for h in sol.history],
                integration_error=sol.integration_error, message=sol.message)  # fmt: skip


class Baseline:
    """A worker process running ``rev``'s replica.solve, unpacked from git into a temporary directory."""

    def __init__(self, rev: str):
        self.tmp = tempfile.TemporaryDirectory(prefix="attnsim-replica-")
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "attnsim"], capture_output=True)
        if archive.returncode:
            raise SystemExit(f"{rev}: not a revision of {ROOT} ({archive.stderr.decode().strip()})")
        with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
            tar.extractall(self.tmp.name, filter="data")
        env = dict(os.environ, PYTHONPATH=self.tmp.name, PYTHONSAFEPATH="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=env, cwd=self.tmp.name,
        )  # fmt: skip
        where = json.loads(self.proc.stdout.readline())["file"]
        if not where.startswith(self.tmp.name):
            raise SystemExit(f"the baseline worker imported {where}, not {rev}'s package")

    def solve(self, settings: dict, branch: str) -> dict:
        self.proc.stdin.write(json.dumps({"settings": settings, "branch": branch}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()
        self.tmp.cleanup()


def difference(a: dict, b: dict) -> float | None:
    """The largest relative difference of two answers (m and theta relative to at least 1e-3)."""
    if not (a["converged"] and b["converged"]):
        return None
    return max(abs(a[k] - b[k]) / max(abs(b[k]), 1e-3 if k in ("m", "theta") else 1e-300) for k in KEYS)


def spread(v: list) -> str:
    return f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="70b8a38", help="the older revision (default 70b8a38)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--scan", action="store_true", help="also time this checkout on the whole grid")
    ap.add_argument("--paths", action="store_true", help="with --scan: each resolved point again, untracked")
    ap.add_argument("--plot", help="write the times as a chart")
    ap.add_argument("--json", default="", help="write the measurements here")
    args = ap.parse_args()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()  # fmt: skip
    base = Baseline(args.baseline)
    solve_here({"alpha": 1.5}, "semantic")  # the compiled map loaded (or compiled) once
    base.solve({"alpha": 1.5}, "semantic")  # the baseline's imports
    env = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")}
    pinned = ", ".join(f"{k}={v}" for k, v in env.items())
    print(f"{pinned}; median of {args.reps}, each solve() from scratch; this checkout ({head}) against "
          f"{args.baseline}")  # fmt: skip
    print(f"| fixed point | orders | {head}, s | {args.baseline}, s | ratio | answers differ by |")
    print("|---|---|---|---|---:|---|")
    table = []
    for label, settings, branch in CASES:
        fast, slow = [], []
        for _ in range(args.reps):  # interleaved: the machine's load falls on both alike
            a = solve_here(settings, branch)
            fast.append(a["s"])
            b = base.solve(settings, branch)
            slow.append(b["s"])
        d = difference(a, b)
        same = (f"{d:.1e}" if d is not None else "both not resolved" if a["converged"] == b["converged"]
                else f"DIFFERS: resolved {a['converged']} / {b['converged']}")  # fmt: skip
        orders = ",".join(map(str, a["orders"])) or "-"
        row = {"case": label, "orders": orders, "converged": a["converged"],
               "head_s": statistics.median(fast), "head_min": min(fast), "head_max": max(fast),
               "base_s": statistics.median(slow), "base_min": min(slow), "base_max": max(slow),
               "same": same}  # fmt: skip
        table.append(row)
        print(f"| {label} | {orders}{'' if a['converged'] else ' (not resolved)'} | {spread(fast)} | "
              f"{spread(slow)} | {row['base_s'] / row['head_s']:.1f}x | {same} |", flush=True)  # fmt: skip
    base.close()
    ratios = [r["base_s"] / r["head_s"] for r in table]
    print(f"ratio: median {statistics.median(ratios):.1f}x, least {min(ratios):.1f}x")
    scan = []
    if args.scan:
        print("\nthe published grid, this checkout alone (seconds per solve; not resolved: the rule's orders "
              "did not agree)")  # fmt: skip
        for omega in GRID_OMEGA:
            for teacher in ("A1", "A2"):  # (at omega = 0 the two are one teacher: a check of the timing)
                for alpha in GRID_ALPHA:
                    for branch in ("semantic", "positional"):
                        settings = {"alpha": alpha, "omega": omega}
                        if teacher == "A2":
                            settings["teacher_A"] = A2
                        a = solve_here(settings, branch)
                        scan.append({"omega": omega, "teacher": teacher, "alpha": alpha, "branch": branch,
                                     "s": a["s"], "converged": a["converged"],
                                     "orders": ",".join(map(str, a["orders"])),
                                     "message": a["message"]})  # fmt: skip
                        verdict = "" if a["converged"] else ", not resolved"
                        if args.paths and a["converged"]:  # the same solve along the untracked path
                            b = solve_here(settings, branch, track=False)
                            d = difference(a, b)
                            scan[-1]["untracked"] = d if d is not None else "not resolved"
                            verdict += f"; untracked: {scan[-1]['untracked']:.1e}" if d is not None else (
                                "; untracked: not resolved")  # fmt: skip
                        print(f"omega {omega} {teacher} alpha {alpha} {branch}: {a['s']:.2f} s, orders "
                              f"{scan[-1]['orders']}{verdict}", flush=True)  # fmt: skip
        ok = [r["s"] for r in scan if r["converged"]]
        bad = [r["s"] for r in scan if not r["converged"]]
        print(f"resolved {len(ok)} of {len(scan)}: slowest {max(ok):.2f} s, median "
              f"{statistics.median(ok):.2f} s"
              + (f"; not resolved {len(bad)}: slowest {max(bad):.2f} s" if bad else ""))  # fmt: skip
        if args.paths:
            paths = [r["untracked"] for r in scan if "untracked" in r]
            same = [d for d in paths if not isinstance(d, str) and d <= 1e-6]
            other = [str(d) for d in paths if isinstance(d, str) or d > 1e-6]
            print(f"the untracked path (track=False) agrees to 1e-6 at {len(same)} of {len(paths)} resolved "
                  f"points (largest {max(same, default=0):.1e})"
                  + (f"; elsewhere: {', '.join(other)}" if other else ""))  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": table, "scan": scan, "threads": env, "reps": args.reps, "head": head,
                       "baseline": args.baseline}, fh)  # fmt: skip
    if args.plot:
        plot(table, scan, head, args.baseline, args.plot)


def plot(table: list, scan: list, head: str, baseline: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 if scan else 1, figsize=(11 if scan else 8, 4), squeeze=False)
    ax = axes[0, 0]
    y = np.arange(len(table))
    ax.barh(y - 0.2, [r["head_s"] for r in table], 0.4, label=head)
    ax.barh(y + 0.2, [r["base_s"] for r in table], 0.4, label=baseline)
    ax.set_yticks(y, [r["case"] for r in table], fontsize=7)
    ax.set_xscale("log")
    ax.axvline(1.0, color="k", lw=0.8, ls=":")
    ax.set_xlabel("seconds per fixed point (median)")
    ax.legend(fontsize=8)
    if scan:
        ax = axes[0, 1]
        for ok, color, name in ((True, "C0", "resolved"), (False, "C3", "not resolved")):
            pts = sorted(r["s"] for r in scan if r["converged"] == ok)
            ax.plot(range(len(pts)), pts, "o", ms=3, color=color, label=f"{name} ({len(pts)})")
        ax.set_yscale("log")
        ax.axhline(1.0, color="k", lw=0.8, ls=":")
        ax.set_xlabel("published grid points, sorted")
        ax.set_ylabel(f"seconds per solve ({head})")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
