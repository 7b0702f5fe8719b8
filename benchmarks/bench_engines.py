"""Side-by-side timing of attnsim's engines and the paper's PyTorch loop.

Contenders, all on the same data, W(0) and head (the default run: n=20, T=8,
rho=0.1, eta=0.2, lr=5e-3, W and p trained):

* ``torch-official``: the official code's loop: float32, ``(x @ W) @ p``,
  ``torch.optim.SGD`` on W and p (forward, backward and step only: its
  per-step logging is left out, which favours it).
* ``torch-careful``: the same loop written as ``x @ (W @ p)``.
* ``dense``, ``reduced``, ``implicit``: attnsim's ``elapsed_s`` (data, setup,
  training and all metrics, population metrics and the clean-label twin included;
  JIT compilation and interpreter start-up excluded), each run with its setup
  built afresh (the process's cache of reduced setups is emptied first: a cached
  one would leave the setup out of some repetitions and not others). Table 1 also
  gives ``setup_s`` and the ratio to the run without it, as the PyTorch loops are
  timed without theirs (their data and W(0) are made before the clock starts).
  ``implicit`` needs a Gaussian W(0), so it
  runs with ``init_W = gaussian`` (same variance); the others use PyTorch's
  kaiming-uniform W(0).

Tables (``--part``):

1. ``default``: every contender at d = 2000, 1000 steps; ratios of medians.
2. ``d``: seconds per 1000 steps over d in {500 ... 10^6}, each contender
   where it fits in memory and time (PyTorch timed over ``--peer-steps``
   steps and scaled; dense above d = 4000 as a run of 50 steps plus the
   per-step cost scaled to 1000, that cost the difference of runs of 50 and
   150 steps, so their setups cancel; NaN when the difference is lost in the
   noise).
3. ``steps``: the reduced engine for 10^3 ... 10^6 steps (log-spaced logging).
(The reduced GD step against its floor: ``bench_floors.py``.) PyTorch's
contenders run when torch is installed (``pip install '.[bench]'``).

Repetitions are interleaved (A B C, A B C, ...); tables give the median and
the min-max spread. BLAS, OpenMP and Numba threads are pinned to
``--threads`` before anything is imported. Writes the figure
``docs/perf/bench_scaling.png``.

Usage::

    pip install '.[bench]'
    python benchmarks/bench_engines.py [--threads 2] [--reps 3] [--part default,d,steps] [--json PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time

DENSE_TIMED_STEPS = 50


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="attnsim engines vs the PyTorch loop")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peer-steps", type=int, default=50, help="PyTorch steps timed, then scaled")
    ap.add_argument("--part", default="default,d,steps")
    ap.add_argument("--json", help="also write the tables as JSON here (benchmarks/run_all.py reads it)")
    ap.add_argument("--d-list", default="500,1000,2000,4000,8000,16000,100000,1000000")
    ap.add_argument("--peer-max-d", type=int, default=8000)
    ap.add_argument("--dense-max-d", type=int, default=8000)
    ap.add_argument("--reduced-max-d", type=int, default=16000)
    ap.add_argument("--plot", default="docs/perf/bench_scaling.png")
    return ap.parse_args()


ARGS = parse() if __name__ == "__main__" else None
if ARGS is not None:
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402

import attnsim  # noqa: E402
from attnsim.config import Config  # noqa: E402
from attnsim.data.dataset import make_streams  # noqa: E402
from attnsim.data.synthetic import generate  # noqa: E402
from attnsim.init import W0Init, draw_W0  # noqa: E402
from attnsim.run import ensure_compiled  # noqa: E402
from attnsim.runtime.workspace import WORKSPACE  # noqa: E402

RESULTS: dict = {}  # the tables, for --json


def torch_loop(cfg: Config, careful: bool, steps: int) -> float:
    """Seconds for ``steps`` steps of the PyTorch loop on the run's own arrays."""
    import torch

    streams = make_streams(cfg.seed)
    ds = generate(cfg, streams)
    x = torch.tensor(ds.X, dtype=torch.float32)
    y = torch.tensor(ds.y, dtype=torch.float32)
    W = torch.nn.Parameter(
        torch.tensor(draw_W0(W0Init(cfg.init_W, cfg.W_scale), streams.init, cfg.d), dtype=torch.float32)
    )
    p = torch.nn.Parameter(torch.zeros(cfg.d, 1))
    nu = torch.tensor(ds.nu, dtype=torch.float32).view(-1, 1)
    opt = torch.optim.SGD([W, p], lr=cfg.lr)

    def step():
        opt.zero_grad()
        logits = (x @ (W @ p)) if careful else (x @ W @ p)
        s = torch.softmax(logits.squeeze(-1), dim=-1)
        f = torch.sum(s * (x @ nu).squeeze(-1), dim=1)
        loss = torch.log(1.0 + torch.exp(-y * f)).mean()
        loss.backward()
        opt.step()

    step()  # warm-up (allocations), not timed
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - t


SETUP_S: dict[tuple, list[float]] = {}  # setup_s of each attnsim run, by (engine, d, steps)


def attnsim_time(cfg: Config, engine: str) -> float:
    """``elapsed_s`` of one run with its setup built afresh (its ``setup_s`` kept in SETUP_S)."""
    if engine == "implicit":
        cfg = cfg.replace(init_W="gaussian")
    WORKSPACE.setups.clear()
    res = attnsim.simulate(cfg.replace(engine=engine))
    SETUP_S.setdefault((engine, cfg.d, cfg.steps), []).append(res.setup_s)
    return res.elapsed_s


def timed(name: str, cfg: Config, peer_steps: int) -> float:
    """Seconds per ``cfg.steps`` steps for one contender."""
    if name.startswith("torch"):
        return torch_loop(cfg, name == "torch-careful", peer_steps) * cfg.steps / peer_steps
    if name == "dense" and cfg.steps > 3 * DENSE_TIMED_STEPS and cfg.d > 4000:
        # the per-step cost from two short runs (m and 3m steps; their setups cancel), scaled: a
        # difference lost in the noise of the setup gives NaN (shown as unresolved), not a number
        m = DENSE_TIMED_STEPS
        short = attnsim_time(cfg.replace(steps=m, log_every=m), name)
        long = attnsim_time(cfg.replace(steps=3 * m, log_every=m), name)
        per_step = (long - short) / (2 * m)
        return short + per_step * (cfg.steps - m) if per_step > 0.0 else math.nan
    return attnsim_time(cfg, name)


def interleaved(cases: list[tuple[str, Config, int]], reps: int) -> dict[tuple, list[float]]:
    out: dict[tuple, list[float]] = {}
    for rep in range(reps):
        for name, cfg, peer in cases:
            t = timed(name, cfg, peer)
            out.setdefault((name, cfg.d, cfg.steps), []).append(t)
            msg = f"  rep {rep + 1}/{reps} {name:15s} d={cfg.d:<8d} steps={cfg.steps:<8d} {t:10.3f} s"
            print(msg, file=sys.stderr)
    return out


def spread(v: list[float]) -> str:
    return f"{np.median(v):10.4g} ({min(v):.4g}-{max(v):.4g})"


TORCH = importlib.util.find_spec("torch") is not None
PEERS = ["torch-official", "torch-careful"] if TORCH else []


def part_default(args) -> dict:
    names = [*PEERS, "dense", "reduced", "implicit"]
    cfg = Config()
    res = interleaved([(n, cfg, args.peer_steps) for n in names], args.reps)
    med = {n: np.median(res[(n, cfg.d, cfg.steps)]) for n in names}
    print("\n## 1. default run (d=2000, 1000 steps): seconds, median (min-max)")
    print(f"{'contender':15s} {'seconds':>28s} {'setup s':>8s} {'x official':>11s} {'x careful':>10s} "
          f"{'x official without setup':>25s}")  # fmt: skip
    table = {}
    for n in names:
        v = res[(n, cfg.d, cfg.steps)]
        off = med["torch-official"] / med[n] if TORCH else math.nan
        car = med["torch-careful"] / med[n] if TORCH else math.nan
        setups = SETUP_S.get((n, cfg.d, cfg.steps))
        setup = float(np.median(setups)) if setups else math.nan
        # the run without its setup, as the loops are timed: the median of each repetition's difference
        bare = float(np.median(np.subtract(v, setups))) if setups else math.nan
        off_bare = med["torch-official"] / bare if TORCH and setups else math.nan
        print(f"{n:15s} {spread(v):>28s} {setup:8.3f} {off:11.1f} {car:10.1f} {off_bare:25.1f}")
        table[n] = {"s": float(med[n]), "min": min(v), "max": max(v), "x_official": off, "x_careful": car,
                    "setup_s": setup, "x_official_without_setup": off_bare}  # fmt: skip
    RESULTS["default"] = table
    return res


def part_d(args) -> dict:
    d_list = [int(x) for x in args.d_list.split(",")]
    cases = []
    limits = {
        **{peer: args.peer_max_d for peer in PEERS},
        "dense": args.dense_max_d,
        "reduced": args.reduced_max_d,
        "implicit": 10**12,
    }
    for d in d_list:
        for name, lim in limits.items():
            if d > lim:
                continue
            cfg = Config(d=d, steps=1000, log_every=10)
            cases.append((name, cfg, args.peer_steps))
    res = interleaved(cases, args.reps)
    print(
        "\n## 2. seconds per 1000 steps against d "
        f"(medians; dense above d=4000: the per-step cost of {DENSE_TIMED_STEPS} and "
        f"{3 * DENSE_TIMED_STEPS} steps, scaled)"
    )
    names = list(limits)
    print(f"{'d':>8s} " + " ".join(f"{n:>15s}" for n in names) + f" {'implicit x official':>20s}")
    for d in d_list:
        row = []
        for n in names:
            hits = [np.median(v) * 1000 / st for (m, dd, st), v in res.items() if m == n and dd == d]
            row.append(hits[0] if hits else np.nan)
        ratio = row[0] / row[-1] if TORCH and np.isfinite(row[0]) else np.nan
        print(f"{d:8d} " + " ".join(f"{x:15.4g}" for x in row) + f" {ratio:20.0f}")
        RESULTS.setdefault("d", {})[str(d)] = {n: float(x) for n, x in zip(names, row)}
    return res


def part_steps(args) -> dict:
    cases = []
    for steps in (10**3, 10**4, 10**5, 10**6):
        cases.append(("reduced", Config(steps=steps, log_scale="log", log_points=100), 0))
    res = interleaved(cases, args.reps)
    print("\n## 3. reduced engine, default run, log-spaced logging: seconds against steps")
    for (_, _, steps), v in res.items():
        print(f"{steps:>9d} steps {spread(v)}  ({np.median(v) / steps * 1e6:.1f} us/step)")
        RESULTS.setdefault("steps", {})[str(steps)] = {"s": float(np.median(v)), "min": min(v), "max": max(v)}
    return res


def plot(args, res_d: dict | None, res_steps: dict | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    if res_d:
        ax = axes[0]
        for name in ("torch-official", "torch-careful", "dense", "reduced", "implicit"):
            pts = sorted((d, np.median(v) * 1000 / st) for (m, d, st), v in res_d.items() if m == name)
            if pts:
                ax.plot(*zip(*pts), "o-", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("embedding dimension d")
        ax.set_ylabel("seconds per 1000 steps")
        ax.legend(fontsize=8)
        ax.set_title(f"default run, {args.threads} threads", fontsize=10)
    if res_steps:
        ax = axes[1]
        pts = sorted((st, np.median(v)) for (m, d, st), v in res_steps.items())
        ax.plot(*zip(*pts), "o-", color="C3", label="reduced (d = 2000)")
        ax.plot([p[0] for p in pts], [p[0] * 1e-6 * 60 for p in pts], "k:", label="60 s per 10^6 steps")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("steps")
        ax.set_ylabel("seconds")
        ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(args.plot) or ".", exist_ok=True)
    fig.savefig(args.plot, dpi=110)


def main() -> int:
    args = ARGS
    parts = args.part.split(",")
    if TORCH:
        import torch

        torch.set_num_threads(args.threads)
    else:
        print("torch is not installed: attnsim's engines only (pip install '.[bench]' for the peers)")
    ensure_compiled()
    print(f"threads: {args.threads} (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, NUMBA_NUM_THREADS, torch)")
    print(f"repetitions: {args.reps}, interleaved; PyTorch timed over {args.peer_steps} steps and scaled")
    res_d = res_steps = None
    if "default" in parts:
        part_default(args)
    if "d" in parts:
        res_d = part_d(args)
    if "steps" in parts:
        res_steps = part_steps(args)
    if args.plot and (res_d or res_steps):
        plot(args, res_d, res_steps)
        print(f"\nwrote {args.plot}")
    if args.json:
        RESULTS.update(benchmark="engines", threads=args.threads, reps=args.reps, peer_steps=args.peer_steps,
                       plot=args.plot)  # fmt: skip
        with open(args.json, "w") as fh:
            json.dump(RESULTS, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
