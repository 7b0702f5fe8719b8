"""Seconds per GD step of positional/semantic attention (Cui et al. 2024): attnsim (float64, one
fused pass over the tokens per step, the plug-in optimizer's step) against its floor and against
the published torch loop (their ``AttentionModel`` forward, ``quadloss``, autograd and
``torch.optim.SGD`` with weight decay, float32 on the CPU as published on their GPU, and float64),
on the same data and Q(0).

The floor (benchmarks/floor_kernels.py ``token_pass_floor``) is the pass a step cannot avoid over
the (n T x d) token matrix: each row read once, its projection formed and the row added to the
gradient. Each contender takes ``--steps`` steps per repetition, repetitions alternating; medians
and min-max over ``--reps``. Threads (BLAS, Numba, torch) pinned to ``--threads``. Prints the table
and writes the plot (``--plot``).

Usage::

    pip install '.[bench]'   # torch
    python benchmarks/bench_positional_semantic.py [--d-list 250,500,1000] [--alpha 2] [--steps 20]
        [--reps 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d-list", default="250,500,1000")
    ap.add_argument("--alpha", type=float, default=2.0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--plot", default="")
    ap.add_argument("--json", default="", help="write the measurements here")
    args = ap.parse_args()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    import numpy as np
    import torch
    from floor_kernels import token_pass_floor

    from attnsim import simulate
    from attnsim.config import Config
    from attnsim.models.positional_semantic.reference import positions, teacher

    torch.set_num_threads(args.threads)
    rows, record = [], []
    print(
        f"{'d':>6s} {'n':>6s} {'attnsim ms':>11s} {'floor ms':>9s} {'ratio':>6s} "
        f"{'torch f32 ms':>13s} {'torch f64 ms':>13s} {'f32/attnsim':>11s}   (median; min-max)"
    )
    for d in map(int, args.d_list.split(",")):
        res = simulate(
            model="positional_semantic",
            d=d,
            alpha=args.alpha,
            steps=1,
            log_every=1,
            test_n=0,
            pop_points=1024,
        )
        pb, cfg = res.problem, res.config
        X = pb.train.X
        Y = teacher(X - positions(cfg["T"], d), pb.Q_star, cfg["omega"], np.array(cfg["teacher_A"]))
        stepper = pb.stepper(Config(**{k: v for k, v in cfg.items()}))
        grad = np.empty_like(pb.Q0)
        contenders = {
            "attnsim": lambda k, st=stepper: st.advance(0, k),
            "floor": lambda k, X=X, Q=pb.Q0, g=grad: [token_pass_floor(X, Q, g) for _ in range(k)],
        }
        for dtype, name in ((torch.float32, "torch32"), (torch.float64, "torch64")):
            contenders[name] = torch_loop(torch, X, Y, pb.Q0, d, dtype)
        times = {k: [] for k in contenders}
        for fn in contenders.values():  # warm-up (compilation, first allocations)
            fn(2)
        for _ in range(args.reps):
            for name, fn in contenders.items():
                t = time.perf_counter()
                fn(args.steps)
                times[name].append(1e3 * (time.perf_counter() - t) / args.steps)
        med = {k: float(np.median(v)) for k, v in times.items()}
        span = {k: f"{min(v):.2f}-{max(v):.2f}" for k, v in times.items()}
        rows.append((d, cfg["n"], med, span))
        ratio = float(np.median(np.array(times["attnsim"]) / np.array(times["floor"])))
        Qa = stepper.state()["Q"]  # every contender took 2 + reps x steps steps from the same Q(0)
        same = {
            name: float(np.abs(contenders[name].Q.detach().double().numpy() - Qa).max() / np.abs(Qa).max())
            for name in ("torch32", "torch64")
        }
        record.append({
            "d": d, "n": cfg["n"], "ms": med,
            "ms_min": {k: min(v) for k, v in times.items()}, "ms_max": {k: max(v) for k, v in times.items()},
            "x_floor": ratio,
            "x_float32": med["torch32"] / med["attnsim"],
            "x_float64": med["torch64"] / med["attnsim"],
            "q_rel_diff": same,
        })  # fmt: skip
        print(
            f"{d:6d} {cfg['n']:6d} {med['attnsim']:11.3f} {med['floor']:9.3f} "
            f"{med['attnsim'] / med['floor']:6.2f} "
            f"{med['torch32']:13.3f} {med['torch64']:13.3f} {med['torch32'] / med['attnsim']:11.1f}   "
            f"({span['attnsim']}; {span['floor']}; {span['torch32']}; {span['torch64']})"
        )
        print(
            f"{'':14s}after {2 + args.reps * args.steps} steps, max |Q_torch - Q_attnsim| / max |Q|: "
            f"float64 {same['torch64']:.1e}, float32 {same['torch32']:.1e}"
        )
    print(
        f"threads {args.threads} (BLAS, Numba, torch); "
        f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}"
    )
    if args.json:
        import json

        with open(args.json, "w") as fh:
            json.dump({"rows": record, "threads": args.threads, "alpha": args.alpha}, fh, indent=1)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
        ds = [r[0] for r in rows]
        for key, label in (
            ("attnsim", "attnsim (float64)"),
            ("floor", "floor: one pass over the tokens"),
            ("torch32", "published torch loop, float32"),
            ("torch64", "published torch loop, float64"),
        ):
            ax.loglog(ds, [r[2][key] for r in rows], "o-", label=label)
        ax.set_xlabel(f"$d$ ($n = {args.alpha:g} d$, $T$ = 2)")
        ax.set_ylabel("ms per GD step")
        ax.legend(fontsize=8)
        fig.savefig(args.plot, dpi=110)
        print(f"wrote {args.plot}")


def torch_loop(torch, X, Y, Q0, d, dtype):
    """The published training step (src/empirics_mixed_teacher_softmax.py: AttentionModel.forward,
    quadloss, loss.backward, torch.optim.SGD(lr 0.15, weight_decay 0.01)), on the same data."""
    Xt, Yt = torch.tensor(X, dtype=dtype), torch.tensor(Y, dtype=dtype)
    Q = torch.nn.Parameter(torch.tensor(Q0, dtype=dtype))
    opt = torch.optim.SGD([{"params": [Q], "weight_decay": 0.01}], lr=0.15)
    softmax = torch.nn.Softmax(dim=-1)
    scale = d**0.5

    def steps(k):
        for _ in range(k):
            xQ = torch.einsum("imk,kl->iml", Xt, Q / scale)
            S = softmax(torch.einsum("iml,inl->imn", xQ, xQ))
            loss = torch.sum((torch.einsum("imn,inj->imj", S, Xt) - Yt) ** 2) / 2 / d
            opt.zero_grad()
            loss.backward()
            opt.step()

    steps.Q = Q  # the state, to compare with attnsim's after the same steps
    return steps


if __name__ == "__main__":
    main()
