"""Side-by-side timing of attnsim's engines and the paper's PyTorch loop.

Contenders, all on the same data, W(0) and head (the default run: n=20, T=8,
rho=0.1, eta=0.2, lr=5e-3, W and p trained):

* ``torch-official``: the official code's loop: float32, ``(x @ W) @ p``,
  ``torch.optim.SGD`` on W and p (forward, backward, step only: its per-step
  logging is left out, which favours it).
* ``torch-careful``: the same loop written as ``x @ (W @ p)``.
* ``dense``, ``reduced``: attnsim's ``elapsed_s`` (data, setup, training and all
  metrics, population metrics included; JIT compilation excluded).

PyTorch contenders are timed for ``--peer-steps`` steps and scaled to
``--steps``. Repetitions are interleaved (A B C D, A B C D, ...) and the table
reports the median with the min-max spread, and ratios of medians. BLAS, OpenMP
and Numba threads are pinned to ``--threads`` before anything is imported.

Usage::

    pip install '.[bench]'
    python benchmarks/bench_engines.py [--d 2000] [--threads 2] [--reps 3]

writes ``figures/bench_default.png`` and prints the table.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--peer-steps", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engines", default="torch-official,torch-careful,dense,reduced")
    ap.add_argument("--plot", default="figures/bench_default.png")
    return ap.parse_args()


ARGS = parse() if __name__ == "__main__" else None
if ARGS is not None:
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402

import attnsim  # noqa: E402
from attnsim.config import Config  # noqa: E402
from attnsim.data import draw_W0, generate, make_streams  # noqa: E402
from attnsim.run import ensure_compiled  # noqa: E402


def torch_loop(cfg: Config, careful: bool, steps: int) -> float:
    """Seconds for ``steps`` steps of the PyTorch loop on the run's own arrays."""
    import torch

    streams = make_streams(cfg.seed)
    ds = generate(cfg, streams)
    W0 = draw_W0(cfg, streams.init)
    x = torch.tensor(ds.X, dtype=torch.float32)
    y = torch.tensor(ds.y, dtype=torch.float32)
    W = torch.nn.Parameter(torch.tensor(W0, dtype=torch.float32))
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


def attnsim_run(cfg: Config, engine: str) -> float:
    return attnsim.simulate(cfg.replace(engine=engine)).elapsed_s


def main() -> int:
    args = ARGS
    cfg = Config(d=args.d, steps=args.steps)
    names = args.engines.split(",")
    if any(n.startswith("torch") for n in names):
        import torch

        torch.set_num_threads(args.threads)
    ensure_compiled()
    times: dict[str, list[float]] = {n: [] for n in names}
    scale = args.steps / args.peer_steps
    for rep in range(args.reps):
        for name in names:
            if name == "torch-official":
                t = torch_loop(cfg, False, args.peer_steps) * scale
            elif name == "torch-careful":
                t = torch_loop(cfg, True, args.peer_steps) * scale
            else:
                t = attnsim_run(cfg, name)
            times[name].append(t)
            print(f"rep {rep + 1}/{args.reps} {name:15s} {t:9.3f} s", file=sys.stderr)
    med = {n: float(np.median(v)) for n, v in times.items()}
    print(
        f"\nd={args.d}, {args.steps} steps, threads={args.threads} (OPENBLAS/OMP/NUMBA), "
        f"median of {args.reps} interleaved repetitions; torch timed over {args.peer_steps} steps and scaled"
    )
    print(f"{'contender':15s} {'median s':>10s} {'min-max s':>19s} {'x official':>11s} {'x careful':>10s}")
    for n in names:
        lo, hi = min(times[n]), max(times[n])
        vs_off = med.get("torch-official", np.nan) / med[n]
        vs_car = med.get("torch-careful", np.nan) / med[n]
        print(f"{n:15s} {med[n]:10.3f} {lo:9.3f}-{hi:<9.3f} {vs_off:11.1f} {vs_car:10.1f}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3))
        ax.barh(names, [med[n] for n in names], xerr=None, color="0.5")
        for i, n in enumerate(names):
            ax.plot(times[n], [i] * len(times[n]), "k|")
        ax.set_xscale("log")
        ax.set_xlabel(f"seconds per {args.steps} steps (d = {args.d}, {args.threads} threads)")
        ax.invert_yaxis()
        fig.tight_layout()
        os.makedirs(os.path.dirname(args.plot) or ".", exist_ok=True)
        fig.savefig(args.plot, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
