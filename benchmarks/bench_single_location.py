"""Single-location regression: attnsim's population PGD beside the authors' own JAX code
(PierreMarion23/single-location-regression, dynamics.py's pgd_step, unmodified), from the same
initial state, in float64 and float32: the largest gap between their overlaps and attnsim's along
the run, and the time per run. Their code is not part of attnsim; give a checkout of it and a
Python with JAX and quadax installed (``pip install jax jaxlib quadax``):

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_single_location.py --their-code DIR \\
        --jax-python PATH [--steps 3000]

Without them it prints attnsim's side alone. What it measures is in docs/single-location.md.
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

import attnsim
from attnsim.data.dataset import make_streams
from attnsim.models.single_location.reference import initial_kv, teacher_directions

# run in the JAX interpreter: their pgd_step from the given state, the overlaps at every log point
THEIRS = """
import json, sys
import jax
jax.config.update("jax_enable_x64", sys.argv[1] == "64")
sys.path.insert(0, sys.argv[2])
import numpy as np
from dynamics import pgd_step
s = np.load(sys.argv[3])
from jax import numpy as jnp
k, v, ks, vs = (jnp.asarray(s[n]) for n in ("k", "v", "k_star", "v_star"))
params, out = (k, v), []
for step in range(int(s["steps"])):
    params, risk, kappa, nu, theta, eta, rho = pgd_step(params, ks, vs, int(s["d"]), int(s["L"]),
        float(s["gamma"]), float(s["lam"]), float(s["alpha"]), None, None, None)
    if (step + 1) % int(s["log"]) == 0:
        out.append([float(x) for x in (kappa, nu, theta, eta, rho)])
json.dump(out, open(sys.argv[4], "w"))
"""
CASES = {  # two of their config.py's runs, cut to --steps
    "sphere, lambda 0.9, lr 1e-3": {"init": "sphere", "attention_scale": 0.9, "lr": 1e-3},
    "manifold, lambda 0.1, lr 4e-3": {"init": "manifold", "attention_scale": 0.1, "lr": 4e-3},
}


def attnsim_run(keys: dict, steps: int, log: int) -> tuple[np.ndarray, float]:
    cfg = {"model": "single_location", "steps": steps, "log_every": log, **keys}
    t = time.perf_counter()
    res = attnsim.simulate(cfg)
    wall = time.perf_counter() - t
    tr = res.trajectory
    names = ("k_kstar", "v_vstar", "v_kstar", "vstar_k", "k_v")
    return np.stack([tr[n] for n in names], axis=1)[1:], wall


def their_run(
    keys: dict, steps: int, log: int, code: str, python: str, bits: str
) -> tuple[np.ndarray, float]:
    d, L = 400, 10
    streams = make_streams(0)
    ks, vs = teacher_directions(d, streams.data)
    k, v = initial_kv(keys["init"], ks, vs, streams.init)
    with tempfile.TemporaryDirectory() as tmp:
        state, out, script = Path(tmp, "s.npz"), Path(tmp, "o.json"), Path(tmp, "theirs.py")
        np.savez(state, k=k, v=v, k_star=ks, v_star=vs, d=d, L=L, gamma=np.sqrt(0.5),
                 lam=keys["attention_scale"], alpha=keys["lr"], steps=steps, log=log)  # fmt: skip
        script.write_text(THEIRS)
        t = time.perf_counter()
        subprocess.run(
            [python, str(script), bits, code, str(state), str(out)], check=True, capture_output=True
        )
        wall = time.perf_counter() - t
        return np.array(json.loads(out.read_text())), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--their-code", help="a checkout of PierreMarion23/single-location-regression")
    ap.add_argument("--jax-python", help="a Python with jax, jaxlib and quadax")
    ap.add_argument("--steps", type=int, default=3000)
    args = ap.parse_args()
    log = max(args.steps // 10, 1)
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
    print(f"OPENBLAS_NUM_THREADS={threads}; {args.steps} PGD steps, seed 0")
    print("| run | attnsim s | theirs float64 s | theirs float32 s | max gap float64 | max gap float32 |")
    print("|---|---|---|---|---|---|")
    for name, keys in CASES.items():
        ours, t_ours = attnsim_run(keys, args.steps, log)
        row = [name, f"{t_ours:.2f}"]
        if args.their_code and args.jax_python:
            gaps, times = [], []
            for bits in ("64", "32"):
                theirs, t = their_run(keys, args.steps, log, args.their_code, args.jax_python, bits)
                gaps.append(np.abs(theirs - ours).max())
                times.append(t)
            row += [f"{times[0]:.1f}", f"{times[1]:.1f}", f"{gaps[0]:.1e}", f"{gaps[1]:.1e}"]
        else:
            row += ["-"] * 4
        print("| " + " | ".join(row) + " |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
