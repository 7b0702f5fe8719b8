"""Seconds per step of the one-layer Transformer encoder: attnsim (float64, the
CLS path, hand-derived gradients applied in place) against the official
PyTorch loop (float32, every position computed, autograd, torch.optim.SGD on
every parameter), on the same data and initial parameters.

Each contender runs in its own process (so the peak resident memory is its
own), takes one warm-up step and then ``--steps`` timed steps; repetitions
alternate between contenders. BLAS, OpenMP, Numba and torch threads are pinned
to ``--threads``. Prints seconds per step (median and min-max over
repetitions), the ratios and the peak memory, for each d (mlp_dim = d), and
draws seconds per step against d (``--plot``). Contenders: the official form in
float32 (what the paper ran), the same in float64 (attnsim's numerics), and
attnsim with one BLAS thread in the step loop, as ``attnsim run`` steps.

Usage::

    pip install '.[bench]'   # torch
    python benchmarks/bench_encoder.py [--d-list 500,1000,2000] [--n 20] [--steps 5] [--reps 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np


def problem(d: int, n: int, T: int = 8):
    from attnsim.config import Config
    from attnsim.data.dataset import make_streams
    from attnsim.data.synthetic import generate
    from attnsim.models.encoder.params import init_params

    cfg = Config(model="encoder", n=n, T=T, d=d, mlp_dim=d)
    streams = make_streams(0)
    ds = generate(cfg, streams)
    return cfg, ds, init_params(cfg, streams.init)


def run_attnsim(d: int, n: int, steps: int) -> float:
    """attnsim's step as ``attnsim run`` takes it: one BLAS thread in the step loop."""
    from threadpoolctl import threadpool_limits

    from attnsim.models.encoder.model import EncoderStepper

    cfg, ds, P = problem(d, n)
    stepper = EncoderStepper(ds.X, ds.y, P, cfg.lr, cfg.skip, cfg.loss, np.zeros((n, 8)))
    with threadpool_limits(limits=1, user_api="blas"):
        stepper.advance(0, 1)
        t = time.perf_counter()
        stepper.advance(1, steps)
    return (time.perf_counter() - t) / steps


def run_torch(d: int, n: int, steps: int, dtype: str = "float32") -> float:
    import torch
    from torch import nn

    torch.set_default_dtype(getattr(torch, dtype))
    cfg, ds, P = problem(d, n)

    class Encoder(nn.Module):
        """The official one-layer encoder (main_one_layer.py): every position."""

        def __init__(self):
            super().__init__()
            self.cls = nn.Parameter(torch.zeros(1, 1, d))
            self.ln1, self.ln2, self.lnf = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d, bias=False)
            self.mlp = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d))
            self.head = nn.Linear(d, 1)

        def forward(self, x):
            h0 = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
            q, k, v = self.qkv(self.ln1(h0)).chunk(3, dim=-1)
            a = torch.softmax(q @ k.transpose(1, 2) / d**0.5, dim=-1)
            h = a @ v + h0
            z = h + self.mlp(self.ln2(h))
            return self.head(self.lnf(z)[:, 0]).squeeze(-1)

    model = Encoder()
    m = model
    names = {
        **{"cls": m.cls, "ln1_g": m.ln1.weight, "ln1_b": m.ln1.bias, "W_qkv": m.qkv.weight},
        **{"ln2_g": m.ln2.weight, "ln2_b": m.ln2.bias, "W1": m.mlp[0].weight, "b1": m.mlp[0].bias},
        **{"W2": m.mlp[2].weight, "b2": m.mlp[2].bias, "lnf_g": m.lnf.weight, "lnf_b": m.lnf.bias},
        **{"head_w": m.head.weight, "head_b": m.head.bias},
    }
    with torch.no_grad():
        for k, p in names.items():
            p.copy_(torch.tensor(P[k]))
    x = torch.tensor(ds.X, dtype=torch.get_default_dtype())
    y = torch.tensor(ds.y, dtype=torch.get_default_dtype())
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)

    def step():
        opt.zero_grad()
        loss = nn.functional.softplus(-y * model(x)).mean()
        loss.backward()
        opt.step()

    step()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t) / steps


def macs(d: int, m: int, n: int, T: int = 8) -> tuple[float, float]:
    """Multiply-adds per GD step in the weight products (the bulk of the work):
    (every position, as the official loop: forward, two backward products per
    weight; the CLS path: the shared query and W_k^T q, n value, MLP and
    backward products, rank-n updates of W_v, W1, W2, rank-one of W_q, W_k)."""
    per_row = 3 * d * d + 2 * d * m
    every = 3.0 * n * (T + 1) * per_row
    cls_path = 2.0 * d * d + 3.0 * n * (d * d + 2 * d * m) + 2.0 * d * d
    return every, cls_path


CONTENDERS = {
    "torch32": "PyTorch, official (float32)",
    "torch64": "PyTorch, float64",
    "attnsim": "attnsim (float64, 1 thread)",
}


def worker(which: str, d: int, n: int, steps: int) -> None:
    if which.startswith("torch"):
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        sec = run_torch(d, n, steps, "float32" if which == "torch32" else "float64")
    else:
        sec = run_attnsim(d, n, steps)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"sec": sec, "peak_mb": peak_mb}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--d-list", default="500,1000,2000")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--plot", default="runs/bench_encoder.png")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        which, d, n, steps = args.worker
        worker(which, int(d), int(n), int(steps))
        return 0
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[var] = str(args.threads)
    what = f"{args.steps} timed steps after one warm-up, threads {args.threads}"
    print(f"encoder, n={args.n}, T=8, mlp_dim=d, {what}; seconds per step, median (min-max) of {args.reps}; "
          "peak resident memory in MB")  # fmt: skip
    print(f"{'d':>6}" + "".join(f" {CONTENDERS[k]:>30}" for k in CONTENDERS) + "   x float32   x float64")
    ds, meds = [], {k: [] for k in CONTENDERS}
    for d in (int(v) for v in args.d_list.split(",")):
        res: dict[str, list] = {k: [] for k in CONTENDERS}
        for _ in range(args.reps):
            for which in res:  # interleaved repetitions
                cmd = [sys.executable, __file__, "--worker", which, str(d), str(args.n), str(args.steps)]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                res[which].append(json.loads(out.stdout.strip().splitlines()[-1]))
        sec = {k: [r["sec"] for r in v] for k, v in res.items()}
        mem = {k: max(r["peak_mb"] for r in v) for k, v in res.items()}
        med = {k: float(np.median(v)) for k, v in sec.items()}
        cells = [f"{med[k]:.4f} ({min(sec[k]):.4f}-{max(sec[k]):.4f}) {mem[k]:.0f}MB" for k in CONTENDERS]
        ratios = f"{med['torch32'] / med['attnsim']:10.1f}x {med['torch64'] / med['attnsim']:10.1f}x"
        print(f"{d:6d}" + "".join(f" {c:>30}" for c in cells) + "  " + ratios)
        every, cls_path = macs(d, d, args.n)
        print(f"{'':6} multiply-adds per step: every position {every:.3g}, CLS path {cls_path:.3g} "
              f"(ratio {every / cls_path:.1f})")  # fmt: skip
        ds.append(d)
        for k in CONTENDERS:
            meds[k].append(med[k])
    _plot(ds, meds, args)
    return 0


def _plot(ds, meds, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for k, label in CONTENDERS.items():
        ax.plot(ds, meds[k], "o-", label=label)
    ax.set(xscale="log", yscale="log", xlabel="d = mlp_dim", ylabel="seconds per step",
           title=f"one-layer encoder, n = {args.n}, T = 8 ({args.threads} threads for PyTorch)")  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(args.plot) or ".", exist_ok=True)
    fig.savefig(args.plot, dpi=110)
    print(f"wrote {args.plot}")


if __name__ == "__main__":
    sys.exit(main())
