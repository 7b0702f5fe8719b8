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
attnsim as ``attnsim run`` steps (its BLAS threads as the stepper sets them),
and attnsim's floor timed in attnsim's process at the same thread settings,
alternating with its steps: the nine BLAS passes of SPEC §9, and those plus
the four matrix-vector passes over W_q and W_k. Then where attnsim's step
goes (``step_parts``): more steps with every BLAS call of the step timed, its
seconds in the nine passes, in W_q's and W_k's, and in the rest.

An encoder run's cost beyond its steps (``--fixed-reps``): the default encoder
(``--set model=encoder --set test_n=200``; the encoder has no clean-label twin
unless asked) run for s and 3s steps in paired fresh processes (kernels warm);
its ``elapsed_s`` at s steps less s times the pair's per-step slope is what the
run costs besides its steps (data, setup, the first forward pass, the metrics,
the final state; the slope holds a step and its test-set evaluation). Median
over the pairs.

Usage::

    pip install '.[bench]'   # torch
    python benchmarks/bench_encoder.py [--d-list 500,1000,2000] [--n 20] [--steps 5] [--reps 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import importlib.util
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


def floor_passes(d: int, m: int, n: int):
    """The nine BLAS passes a GD step of the CLS path cannot avoid, in the
    order its data dependencies impose (SPEC §9): the forward products
    U W^T of W_v, W1, W2 (n rows), then per matrix, in reverse, the
    back-propagation D W and the in-place rank-n update W -= lr D^T U
    (SciPy's dgemm, beta = 1). Returns a callable that runs them once, and
    the same with the four matrix-vector passes over W_q and W_k that the
    CLS query adds (their rank-one updates held back, as attnsim's step does)."""
    from scipy.linalg import blas

    rng = np.random.default_rng(0)
    Ws = [rng.standard_normal(shape) * 0.01 for shape in ((d, d), (m, d), (d, m))]
    Wq, Wk = (rng.standard_normal((d, d)) * 0.01 for _ in range(2))
    U = [rng.standard_normal((n, W.shape[1])) for W in Ws]
    D = [rng.standard_normal((n, W.shape[0])) for W in Ws]
    x = rng.standard_normal(d)

    def nine():
        for W, u in zip(Ws, U):
            blas.dgemm(1.0, W.T, u.T, trans_a=1)
        for W, u, g in zip(Ws[::-1], U[::-1], D[::-1]):
            blas.dgemm(1.0, W.T, g.T)
            blas.dgemm(-1e-3, u.T, g.T, beta=1.0, c=W.T, trans_b=1, overwrite_c=1)

    def with_query():
        nine()
        for W in (Wq, Wk):
            blas.dgemv(1.0, W.T, x, trans=1)
            blas.dgemv(1.0, W.T, x)

    return nine, with_query


def run_attnsim(d: int, n: int, steps: int, block: int = 5) -> dict:
    """attnsim's step as ``attnsim run`` takes it (the stepper sets its BLAS
    threads), alternating with its floors at the same thread count in the same
    process, in blocks of ``block`` calls (a block of steps, a block of each
    floor, ...): per-call times are block times over ``block``."""
    from threadpoolctl import threadpool_limits

    from attnsim.models.encoder.model import EncoderStepper

    cfg, ds, P = problem(d, n)
    stepper = EncoderStepper(ds.X, ds.y, P, cfg.lr, cfg.skip, cfg.loss, np.zeros((n, 8)))
    nine, with_query = floor_passes(d, d, n)
    times: dict[str, list[float]] = {"attnsim": [], "floor": [], "floor_q": []}
    done = [2]

    def steps_block():
        stepper.advance(done[0], block)
        done[0] += block

    def repeat(fn):
        return lambda: [fn() for _ in range(block)]

    with threadpool_limits(limits=stepper.blas_threads, user_api="blas"):
        stepper.advance(0, 2)
        nine(), with_query()
        for _ in range(max(1, steps // block)):
            for name, fn in (
                ("attnsim", steps_block),
                ("floor", repeat(nine)),
                ("floor_q", repeat(with_query)),
            ):
                t = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t) / block)
        out = {name: float(np.median(v)) for name, v in times.items()}
        out["parts"] = step_parts(stepper, done[0], max(block, steps))
    out["ratio"] = float(np.median(np.array(times["attnsim"]) / np.array(times["floor"])))
    out["blas_threads"] = stepper.blas_threads
    return out


def step_parts(stepper, step0: int, steps: int) -> dict:
    """Where a step's seconds go, from ``steps`` more steps with every BLAS call of
    the step timed: in the nine passes (the forward products of W_v, W1, W2, their
    back-propagation and their rank-n updates), in W_q's and W_k's (the four
    matrix-vector passes with the held updates' corrections, and those updates going
    in every 32 steps), and the rest (the per-row kernels, the loss, Python); seconds
    per step. A timer costs well under a microsecond per call, against milliseconds."""
    from attnsim.models.encoder import linalg, passes

    acc = {"nine": 0.0, "query": 0.0}
    inside = [False]  # within Held.apply: its products are W_q's and W_k's, not the nine

    def timed(fn, part):
        def call(*args, **kw):
            if inside[0]:
                return fn(*args, **kw)
            t = time.perf_counter()
            try:
                inside[0] = part == "query"
                return fn(*args, **kw)
            finally:
                inside[0] = False
                acc[part] += time.perf_counter() - t

        return call

    nine = [(passes, "mm_t"), (passes, "mm"), (linalg.Outer, "subtract_from")]
    query = [(linalg.Held, "mv"), (linalg.Held, "mtv"), (linalg.Held, "apply")]
    patched = [(o, n, "nine") for o, n in nine] + [(o, n, "query") for o, n in query]
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patched]
    try:
        for owner, name, part in patched:
            setattr(owner, name, timed(getattr(owner, name), part))
        t = time.perf_counter()
        stepper.advance(step0, steps)
        total = time.perf_counter() - t
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)
    in_nine, in_query = acc["nine"] / steps, acc["query"] / steps
    return {
        "step": total / steps,
        "nine": in_nine,
        "query": in_query,
        "rest": total / steps - in_nine - in_query,
    }


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
    "attnsim": "attnsim (float64)",
    "floor": "floor: nine BLAS passes",
    "floor_q": "floor + W_q, W_k reads",
}
PROCESSES = ("torch32", "torch64", "attnsim")  # attnsim's process also times the floors


def worker(which: str, d: int, n: int, steps: int) -> None:
    if which == "run":
        import warnings

        from attnsim.run import ensure_compiled, simulate

        warnings.simplefilter("ignore")
        ensure_compiled(model="encoder")
        r = simulate({"model": "encoder", "test_n": 200, "steps": steps})
        print(json.dumps({"elapsed_s": r.elapsed_s, "setup_s": r.setup_s, "d": r.config["d"]}))
        return
    if which.startswith("torch"):
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        out = {"torch": run_torch(d, n, steps, "float32" if which == "torch32" else "float64")}
    else:
        out = run_attnsim(d, n, steps)
    out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


def fixed_cost(reps: int, steps: int, env: dict) -> dict:
    """Seconds of an encoder run beyond its steps, from ``reps`` pairs of fresh processes."""

    def one(s: int) -> dict:
        cmd = [sys.executable, __file__, "--worker", "run", "0", "0", str(s)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    one(2)  # the kernels loaded or compiled once, untimed
    fixed, slope, setup = [], [], []
    for _ in range(reps):
        a, b = one(steps), one(3 * steps)
        per_step = (b["elapsed_s"] - a["elapsed_s"]) / (2 * steps)
        fixed.append(a["elapsed_s"] - steps * per_step)
        slope.append(per_step)
        setup.append(a["setup_s"])
    return {"d": a["d"], "steps": steps, "reps": reps, "fixed_s": float(np.median(fixed)),
            "fixed_min": min(fixed), "fixed_max": max(fixed), "ms_per_step": 1e3 * float(np.median(slope)),
            "setup_s": float(np.median(setup))}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--d-list", default="500,1000,2000")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per process (in blocks of 5)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--plot", default="runs/bench_encoder.png")
    ap.add_argument("--json", help="also write the table as JSON here (benchmarks/run_all.py reads it)")
    ap.add_argument("--fixed-reps", type=int, default=6, help="pairs of runs for the fixed cost (0: skip)")
    ap.add_argument("--fixed-steps", type=int, default=20)
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        which, d, n, steps = args.worker
        worker(which, int(d), int(n), int(steps))
        return 0
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[var] = str(args.threads)
    have_torch = importlib.util.find_spec("torch") is not None
    procs = [k for k in PROCESSES if have_torch or not k.startswith("torch")]
    shown = [k for k in CONTENDERS if have_torch or not k.startswith("torch")]
    what = f"{args.steps} timed steps after one warm-up, threads {args.threads}"
    note = "" if have_torch else "; torch not installed"
    print(f"encoder, n={args.n}, T=8, mlp_dim=d, {what}; ms per step, median (min-max) of {args.reps} "
          f"processes each{note}")  # fmt: skip
    head = "".join(f" {CONTENDERS[k]:>28}" for k in shown)
    print(f"{'d':>6}{head}  x floor" + ("  x f32  x f64" if have_torch else ""))
    rows = []
    for d in (int(v) for v in args.d_list.split(",")):
        res: dict[str, list] = {k: [] for k in procs}
        for _ in range(args.reps):
            for which in procs:  # interleaved repetitions
                cmd = [sys.executable, __file__, "--worker", which, str(d), str(args.n), str(args.steps)]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                res[which].append(json.loads(out.stdout.strip().splitlines()[-1]))
        sec = {k: [r["torch"] for r in res[k]] for k in procs if k.startswith("torch")}
        for k in ("attnsim", "floor", "floor_q"):
            sec[k] = [r[k] for r in res["attnsim"]]
        row = {"d": d, "mlp_dim": d, "n": args.n, "threads": args.threads,
               "blas_threads_in_step": res["attnsim"][0]["blas_threads"],
               "ms": {k: 1e3 * float(np.median(v)) for k, v in sec.items()},
               "ms_min": {k: 1e3 * min(v) for k, v in sec.items()},
               "ms_max": {k: 1e3 * max(v) for k, v in sec.items()},
               "peak_mb": {k: max(r["peak_mb"] for r in res[k]) for k in procs},
               "x_floor": float(np.median([r["ratio"] for r in res["attnsim"]])),
               "x_floor_q": float(np.median(sec["attnsim"])) / float(np.median(sec["floor_q"]))}  # fmt: skip
        parts = [r["parts"] for r in res["attnsim"] if "parts" in r]
        if parts:  # where a step goes, each part the median over the processes
            row["parts_ms"] = {k: 1e3 * float(np.median([p[k] for p in parts])) for k in parts[0]}
        if have_torch:
            row["x_float32"] = row["ms"]["torch32"] / row["ms"]["attnsim"]
            row["x_float64"] = row["ms"]["torch64"] / row["ms"]["attnsim"]
        every, cls_path = macs(d, d, args.n)
        row["macs_every_position"], row["macs_cls_path"] = every, cls_path
        rows.append(row)
        cells = "".join(f" {_cell(row, k):>28}" for k in shown)
        tail = f"  {row['x_float32']:5.1f}  {row['x_float64']:5.1f}" if have_torch else ""
        print(f"{d:6d}{cells}  {row['x_floor']:6.2f}{tail}")
        print(f"{'':6} multiply-adds per step: every position {every:.3g}, CLS path {cls_path:.3g} "
              f"(ratio {every / cls_path:.1f})")  # fmt: skip
        if parts:
            pm = row["parts_ms"]
            print(f"{'':6} a step with its BLAS calls timed, ms: {pm['step']:.2f} = nine passes "
                  f"{pm['nine']:.2f} + W_q, W_k {pm['query']:.2f} + the rest {pm['rest']:.2f}")  # fmt: skip
    print("x floor: attnsim's step over the nine passes: the median over alternating blocks of 5 of each")
    _plot(rows, shown, args)
    out = {"benchmark": "encoder", "rows": rows, "plot": args.plot}
    if args.fixed_reps:
        f = out["fixed"] = fixed_cost(args.fixed_reps, args.fixed_steps, env)
        print(f"an encoder run beyond its steps (d = {f['d']}, test_n = 200): {f['fixed_s']:.3f} s "
              f"({f['fixed_min']:.3f}-{f['fixed_max']:.3f}; {f['ms_per_step']:.1f} ms per step, setup_s "
              f"{f['setup_s']:.3f}), median of {f['reps']} pairs of {f['steps']} and {3 * f['steps']} steps "
              "(target: 0.3 s)")  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


def _cell(row: dict, k: str) -> str:
    return f"{row['ms'][k]:.1f} ({row['ms_min'][k]:.1f}-{row['ms_max'][k]:.1f})"


def _plot(rows, shown, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ds = [r["d"] for r in rows]
    for k in shown:
        ax.plot(ds, [r["ms"][k] for r in rows], "o-" if k in PROCESSES else "s--", label=CONTENDERS[k])
    ax.set(xscale="log", yscale="log", xlabel="d = mlp_dim", ylabel="ms per step",
           title=f"one-layer encoder, n = {args.n}, T = 8 ({args.threads} threads for PyTorch)")  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(args.plot) or ".", exist_ok=True)
    fig.savefig(args.plot, dpi=110)
    print(f"wrote {args.plot}")


if __name__ == "__main__":
    sys.exit(main())
