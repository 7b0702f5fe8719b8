"""Whole-process latency, as a user feels it, against the floor of any Numba +
SciPy tool.

Commands, run in turn (A B C, A B C, ...) after one warm-up round (the Numba
kernel cache is warm, as after the first run):

* floor: ``python -c "import numba, scipy.special, scipy.linalg"``
* ``attnsim --version``
* ``attnsim run --quiet --out DIR`` (the default experiment), whose
  result.json also gives ``elapsed_s`` (the simulation) and ``startup_s``.

Prints medians with min-max spread and the ratios to the floor; of the
fresh run's ``elapsed_s``, its ``setup_s`` (building the problem) and how
much faster the same run is when repeated in that process with its setup
built again (what the first run of a process pays once; ~0 means nothing
once-per-process is left in ``elapsed_s``); as a floor of ``setup_s``, the
seconds a fresh process needs only to draw the default run's W(0) (d = 2000:
4e6 numbers from the run's init stream; the reduced engine must draw the
same W(0) as the dense one, then multiply it twice by a d x k basis); and
the seconds the first call of a cached one-line kernel takes after the
floor's imports (Numba's own loading, which refreshes its compiler context
first: attnsim uses Numba's public interface only). BLAS and
OpenMP threads are pinned to ``--threads`` (the CLI pins BLAS itself inside a
run); Python's bytecode caches are on whatever the environment says (as after
``pip install``, every module's compiled bytecode is read, attnsim's too).
Target (SPEC §9): --version <= 0.6x the floor; ``attnsim run`` is reported
against the floor without a target (start-up is bought with public APIs only).

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

DRAW_W0 = """
import time
from attnsim.config import Config
from attnsim.data.dataset import make_streams
from attnsim.init import W0_blocks, W0Init
cfg = Config()
t = time.perf_counter()
for _ in W0_blocks(W0Init(cfg.init_W, cfg.W_scale), make_streams(cfg.seed).init, cfg.d):
    pass
print(time.perf_counter() - t)
"""


AGAIN = """
from attnsim.config import Config
from attnsim.runtime.workspace import WORKSPACE
from attnsim.run import simulate
first = simulate(Config())
WORKSPACE.setups.clear()  # build the setup again, as a fresh process does
print(first.elapsed_s, simulate(Config()).elapsed_s)
"""


FIRST_CALL = """
import time
import numpy as np
import numba, scipy.special, scipy.linalg
from attnsim.models.attention import kernels
t = time.perf_counter()
kernels._sumsq(np.ones(3))
print(time.perf_counter() - t)
"""


def spread(v: list[float], sign: str = "") -> str:
    """Median (min-max) of seconds (``sign="+"``: signed)."""
    return f"{np.median(v):{sign}6.3f} ({min(v):{sign}.3f}-{max(v):{sign}.3f})"


def timed(cmd: list[str], env: dict) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the table as JSON here (benchmarks/run_all.py reads it)")
    args = ap.parse_args()
    env = dict(os.environ)
    # Bytecode on, as after ``pip install`` (which compiles every module it installs): the
    # warm-up round writes attnsim's where an editable install has none yet. Without it
    # the floor's imports would read NumPy's, SciPy's and Numba's compiled bytecode while
    # every attnsim module was compiled from source in each run (about 0.05 s of it).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(args.threads)
    exe = shutil.which("attnsim") or sys.exit("attnsim is not on PATH: pip install . first")
    out = Path(tempfile.mkdtemp(prefix="attnsim-bench-"))
    cmds = {
        "floor (import numba, scipy.special, scipy.linalg)": [sys.executable, "-c",
                                                              "import numba, scipy.special, scipy.linalg"],
        "attnsim --version": [exe, "--version"],
        "attnsim run (default experiment)": [exe, "run", "--quiet", "--force", "--out", str(out / "run")],
    }  # fmt: skip
    draw = [sys.executable, "-c", DRAW_W0]
    first_call = [sys.executable, "-c", FIRST_CALL]
    times: dict[str, list[float]] = {k: [] for k in cmds}
    elapsed, setups, startup, draws, agains = [], [], [], [], []
    firsts: list[float] = []
    for rep in range(args.reps + 1):  # the first round warms the caches and is not counted
        for name, cmd in cmds.items():
            t = timed(cmd, env)
            if rep:
                times[name].append(t)
        meta = json.loads((out / "run" / "result.json").read_text())
        again = subprocess.run([sys.executable, "-c", AGAIN], env=env, check=True, capture_output=True,
                               text=True).stdout.split()  # fmt: skip
        drawn = float(subprocess.run(draw, env=env, check=True, capture_output=True, text=True).stdout)
        first = float(subprocess.run(first_call, env=env, check=True, capture_output=True, text=True).stdout)
        if rep:
            firsts.append(first)
            elapsed.append(meta["elapsed_s"])
            setups.append(meta["setup_s"])
            agains.append(float(again[1]) - float(again[0]))
            startup.append(meta["startup_s"])
            draws.append(drawn)
    shutil.rmtree(out, ignore_errors=True)
    floor = np.median(times[next(iter(cmds))])
    print(f"whole-process seconds, median (min-max) of {args.reps}, BLAS/OpenMP threads {args.threads}")
    for name, v in times.items():
        print(f"{name:52s} {spread(v)}  {np.median(v) / floor:5.2f}x floor")
    for label, v, sign in (
        ("fresh default run: elapsed_s (simulation)", elapsed, ""),
        ("  of which setup_s (data, W(0), its projections)", setups, ""),
        ("  the same run again in that process, minus the first", agains, "+"),
        ("fresh process: draw W(0) alone (d = 2000)", draws, ""),
        ("cached attnsim kernel, first call (Numba's loading)", firsts, ""),
        ("fresh default run: startup_s (imports, kernel loads)", startup, ""),
    ):
        print(f"{label:52s} {spread(v, sign)}")
    if args.json:
        rows = {name: _stats(v, floor) for name, v in times.items()}
        rows.update({label.strip(): _stats(v) for label, v in (
            ("fresh default run: elapsed_s", elapsed), ("of which setup_s", setups),
            ("first call of a cached kernel", firsts),
            ("fresh default run: startup_s", startup))})  # fmt: skip
        bytecode = "on (the warm-up round writes what is missing, as pip install compiles it)"
        table = {"benchmark": "startup", "reps": args.reps, "threads": args.threads,
                 "bytecode_cache": bytecode, "rows": rows}  # fmt: skip
        Path(args.json).write_text(json.dumps(table, indent=1))
    return 0


def _stats(v: list[float], floor: float | None = None) -> dict:
    out = {"s": float(np.median(v)), "min": float(min(v)), "max": float(max(v))}
    if floor is not None:
        out["x_floor"] = out["s"] / float(floor)
    return out


if __name__ == "__main__":
    sys.exit(main())
