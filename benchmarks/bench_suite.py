"""The test suite on a fresh clone, as CI runs it: this repository's HEAD and an older revision,
each ``git clone``d into a temporary folder and ``bash .ci/run`` there (its own virtualenv, the
install from the package index, Numba's cache cold, the linters, pytest), one after the other
on one machine, the order alternating between repetitions. Wall seconds of the whole script,
pytest's own seconds (with the kernels compiled before the tests start, where the revision
does that), the counts, and the exit code:

    python benchmarks/bench_suite.py [--baseline 70b8a38] [--reps 1] [--json F.json] [--plot F.png]

About half an hour on two cores (each clone's .ci/run, 10-17 minutes). The clones hold what is
committed: a change not yet committed is not measured (the script says so). .ci/run sets
OPENBLAS_NUM_THREADS=1 unless it is set; this script leaves it unset for both revisions.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUMMARY = re.compile(r"^=+ (.+) in ([0-9.]+)s(?: \([0-9:]+\))? =+$", re.MULTILINE)
COMPILED = re.compile(r"kernels compiled or loaded in ([0-9.]+) s")


def revision(rev: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True, text=True
    )
    if out.returncode:
        raise SystemExit(f"{rev}: not a revision of {ROOT} ({out.stderr.strip()})")
    return out.stdout.strip()


def one_run(rev: str, logs: Path) -> dict:
    """``bash .ci/run`` in a fresh clone of ``rev``: seconds, pytest's summary, exit code."""
    with tempfile.TemporaryDirectory(prefix="attnsim-suite-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", rev], check=True)
        env = {
            k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "NUMBA_CACHE_DIR")
        }
        env.pop("OPENBLAS_NUM_THREADS", None)
        path = env.get("PATH", "").split(os.pathsep)
        venv = os.environ.get("VIRTUAL_ENV")  # the clone's .ci/run makes and activates its own
        env["PATH"] = os.pathsep.join(p for p in path if not (venv and p.startswith(venv)))
        log = logs / f"suite-{rev}-{time.strftime('%H%M%S')}.log"
        t = time.perf_counter()
        with open(log, "w") as fh:
            rc = subprocess.run(
                ["bash", ".ci/run"], cwd=clone, env=env, stdout=fh, stderr=subprocess.STDOUT
            ).returncode
        wall = time.perf_counter() - t
    text = log.read_text(errors="replace")
    found = SUMMARY.findall(text)
    compiled = COMPILED.search(text)
    summary, pytest_s = (found[-1][0], float(found[-1][1])) if found else ("no pytest summary", float("nan"))
    return {"s": wall, "pytest_s": pytest_s, "compile_first_s": float(compiled.group(1)) if compiled else 0.0,
            "summary": summary, "rc": rc, "log": str(log)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="70b8a38", help="the older revision (default 70b8a38)")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--json", default="", help="write the measurements here")
    ap.add_argument("--plot", help="write a bar chart of the two suites' seconds")
    ap.add_argument("--logs", default="", help="keep each run's output here (default: a temporary folder)")
    args = ap.parse_args()
    head, base = revision("HEAD"), revision(args.baseline)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    if dirty:
        print(
            f"note: uncommitted changes are not measured (the clone of HEAD = {head} holds what is committed)"
        )
    logs = Path(args.logs or tempfile.mkdtemp(prefix="attnsim-suite-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict]] = {head: [], base: []}
    for rep in range(args.reps):
        for rev in (base, head) if rep % 2 == 0 else (head, base):
            r = one_run(rev, logs)
            runs[rev].append(r)
            print(f"{rev}: {r['s']:.0f} s, pytest {r['pytest_s']:.1f} s (+{r['compile_first_s']:.1f} s "
                  f"compiling first), {r['summary']}, exit {r['rc']}", flush=True)  # fmt: skip
    rows = {}
    for label, rev in ((f"this checkout ({head})", head), (f"revision {base}", base)):
        rs = runs[rev]
        med = {k: statistics.median(r[k] for r in rs) for k in ("s", "pytest_s", "compile_first_s")}
        rows[label] = {"rev": rev, **med, "min": min(r["s"] for r in rs), "max": max(r["s"] for r in rs),
                       "summary": rs[-1]["summary"], "rc": [r["rc"] for r in rs]}  # fmt: skip
    mine, old = rows[f"this checkout ({head})"], rows[f"revision {base}"]
    print("| revision | bash .ci/run, s | pytest, s | compiling first, s | tests | exit |")
    print("|---|---:|---:|---:|---|---|")
    for label, r in rows.items():
        print(f"| {label} | {r['s']:.0f} ({r['min']:.0f}-{r['max']:.0f}) | {r['pytest_s']:.1f} | "
              f"{r['compile_first_s']:.1f} | {r['summary']} | {r['rc']} |")  # fmt: skip
    print(f"this checkout over {base}: {mine['s'] / old['s']:.2f}x the time (target <= 0.5x); logs in {logs}")
    out = {"baseline": base, "head": head, "reps": args.reps, "cores": os.cpu_count(), "rows": rows,
           "ratio": mine["s"] / old["s"]}  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 2.2))
        labels = list(rows)
        ax.barh(labels, [rows[k]["s"] for k in labels], color="0.6", label="bash .ci/run")
        ax.barh(labels, [rows[k]["pytest_s"] + rows[k]["compile_first_s"] for k in labels], color="C0",
                label="pytest")  # fmt: skip
        ax.set_xlabel("seconds on a fresh clone")
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)
    if any(rc for r in rows.values() for rc in r["rc"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
