"""Seconds per population evaluation, side by side with another attnsim checkout.

The states are taken from real runs (the default run at several points of its
trajectory, the large-noise run, and a run with nu trained, whose conditional
sd is larger): for each, the seven scalars the population metrics need. Every
contender evaluates the same states with the same number of points
(``--points``, default 4096 = 8 scrambles of 512) in its own process, with
BLAS, OpenMP and Numba threads pinned to ``--threads``; repetitions alternate
between contenders (A B A B ...). The table gives microseconds per evaluation,
median (min-max) over repetitions, and the ratio of medians.

Usage::

    python benchmarks/bench_population.py [--reference PATH_TO_OTHER_CHECKOUT] [--threads 2] [--reps 5]

``--reference`` runs the same timing against the attnsim package found in that
folder (for example ``git worktree add /tmp/old <revision>``), so a change of
the population code can be measured as a ratio in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

STATES = {
    "default, step 0": {"steps": 0},
    "default, step 100": {"steps": 100},
    "default, step 1000": {},
    "large noise, step 1000": {"d": 4500, "signal_norm": 5.0},
    "nu trained, step 300": {"train": "W,p,nu", "steps": 300},
}


def state_scalars() -> dict[str, list[float]]:
    """The population scalars of each state (computed with this checkout)."""
    import attnsim
    from attnsim.models.attention.population import state_scalars as scalars

    out = {}
    for name, over in STATES.items():
        r = attnsim.simulate({**over, "log_every": 10**9, "pop_log_points": 2})
        out[name] = list(scalars(r.problem, r.state["W"], r.state["p"], r.state["nu"]))
    return out


def worker(states_file: str, points: int, evals: int) -> None:
    """Time every state with the attnsim importable here; print JSON."""
    try:  # this checkout's layout, or a checkout from before the models/ folders
        from attnsim.models.attention import population as P
    except ImportError:
        from attnsim import population as P

    states = json.loads(Path(states_file).read_text())
    rng = np.random.default_rng(0)
    roles = np.repeat(np.arange(4), (1, 1, 1, 5))
    if hasattr(P, "population_points"):  # this checkout: bulk points and the tail estimator's
        pop = P.Population(roles, 0.1, 1.0, P.population_points(8, points, rng))
    else:  # checkouts before the tail estimator: the quasi-random points alone
        pop = P.Population(roles, 0.1, 1.0, P.sobol_normals(8, points, rng))
    out = {}
    for name, args in states.items():
        pop.evaluate(*args)  # warm (compilation, caches)
        t = time.perf_counter()
        for _ in range(evals):
            res = pop.evaluate(*args)
        out[name] = {"us": (time.perf_counter() - t) / evals * 1e6, "pop_error": res["pop_error"],
                     "pop_error_se": res["pop_error_se"], "pop_loss": res["pop_loss"]}  # fmt: skip
    print(json.dumps(out))


def run_worker(path: str | None, states_file: str, args, env) -> dict:
    e = dict(env)
    if path is not None:
        e["PYTHONPATH"] = str(Path(path).resolve())
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        states_file,
        "--points",
        str(args.points),
        "--evals",
        str(args.evals),
    ]
    out = subprocess.run(cmd, env=e, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", help="another attnsim checkout to compare with")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--points", type=int, default=4096)
    ap.add_argument("--evals", type=int, default=200)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.points, args.evals)
        return 0
    # as inside a run: BLAS on one thread (simulate pins it around the step loop
    # and the metrics), Numba and attnsim's own threads as given
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["NUMBA_NUM_THREADS"] = str(args.threads)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(state_scalars(), fh)
        states_file = fh.name
    here = str(Path(__file__).resolve().parents[1])
    contenders = {"this checkout": here} | ({"reference": args.reference} if args.reference else {})
    times: dict[str, dict[str, list[float]]] = {c: {} for c in contenders}
    values = {}
    for rep in range(args.reps):
        for c, path in contenders.items():
            res = run_worker(path, states_file, args, env)
            values[c] = res
            for name, r in res.items():
                times[c].setdefault(name, []).append(r["us"])
            print(f"  rep {rep + 1}/{args.reps} {c} done", file=sys.stderr)
    os.unlink(states_file)
    print(f"population evaluation, {args.points} points, NUMBA_NUM_THREADS={args.threads}, BLAS threads 1 "
          f"(as in a run); microseconds per evaluation, median (min-max) of {args.reps}")  # fmt: skip
    head = (
        f"{'state':26s}" + "".join(f"{c:>28s}" for c in contenders) + ("   ratio" if args.reference else "")
    )
    print(head)
    for name in STATES:
        row = f"{name:26s}"
        meds = []
        for c in contenders:
            v = times[c][name]
            meds.append(np.median(v))
            row += f"{np.median(v):14.0f} ({min(v):5.0f}-{max(v):5.0f})"
        if args.reference:
            row += f"  {meds[1] / meds[0]:6.2f}x"
        print(row)
    if args.reference:
        tot = [sum(np.median(times[c][n]) for n in STATES) for c in contenders]
        print(f"{'all states':26s}{tot[0]:28.0f}{tot[1]:28.0f}  {tot[1] / tot[0]:6.2f}x")
        fast = [sum(min(times[c][n]) for n in STATES) for c in contenders]
        print(f"{'all states, fastest reps':26s}{fast[0]:28.0f}{fast[1]:28.0f}  {fast[1] / fast[0]:6.2f}x")
        print("\nvalues (this checkout | reference): pop_error +- se, pop_loss")
        for name in STATES:
            a, b = values["this checkout"][name], values["reference"][name]
            print(f"{name:26s} {a['pop_error']:.4g} +- {a['pop_error_se']:.2g}, {a['pop_loss']:.6f} | "
                  f"{b['pop_error']:.4g} +- {b['pop_error_se']:.2g}, {b['pop_loss']:.6f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
