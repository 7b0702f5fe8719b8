"""Multi-head linear attention in context: attnsim beside a rerun of the authors' own script
(yedizhang/linattn-icl, train.py, unmodified: float32 full-batch SGD in PyTorch). Their README's
ATTN_S command (5 heads, rank one, lr 0.02, init 0.01, P = 5000 sequences of 32 tokens) runs in
their code; attnsim runs GD with the same parametrization (``init=published``: their net.py's
scales, the 1/N their forward pass leaves out absorbed, lr = 0.02 N^(2/3), one step per epoch) on
the population loss and on its own 5000 sequences. The loss levels each visited plateau sits at,
against the saddles L(M_m), the epochs it left them, and the wall time per run. The draws differ
(their data and initialization come from torch's and NumPy's generators), so the exits agree in
distribution, not run by run. Their code is not part of attnsim; give a checkout of it and a
Python with torch installed (``pip install torch``):

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_linear_attention.py --their-code DIR \\
        [--their-python PATH] [--epochs 10001] [--seeds 0 1 2] [--plot PATH]

Without ``--their-code`` it times attnsim alone (the flow of figure 23 and the GD above). About
0.17 s per epoch of theirs on two cores at P = 5000: 30 minutes a seed at 10 001 epochs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import attnsim
from attnsim.models.linear_attention.model import plateaus
from attnsim.models.linear_attention.reference import eigenvalues, saddle_losses

D, CONTEXT, HEADS, LR, INIT = 4, 31, 5, 0.02, 0.01
SADDLES = saddle_losses(eigenvalues(D, "linear"), CONTEXT)


def _levels(loss: np.ndarray, tol: float) -> tuple[list[float], list[float]]:
    """Every epoch logged: the plateau levels and the epochs the loss left them."""
    levels, exits, _ = plateaus(np.arange(loss.size, dtype=float), loss, SADDLES, tol=tol, run=50)
    return levels, [e for e in exits if e is not None]


def attnsim_run(epochs: int, n: int, seed: int) -> tuple[np.ndarray, float]:
    """GD at their settings in attnsim's units; the training (n > 0) or population loss per epoch."""
    cfg = {"model": "linear_attention", "integrator": "gd", "init": "published", "init_scale": INIT,
           "lr": LR * CONTEXT ** (2 / 3), "steps": epochs - 1, "n": n, "seed": seed,
           "log_scale": "linear", "log_every": 1}  # fmt: skip
    t = time.perf_counter()
    res = attnsim.simulate(cfg)
    wall = time.perf_counter() - t
    return np.asarray(res.trajectory["train_loss" if n else "population_loss"]), wall


def their_run(code: str, python: str, epochs: int, n: int, seed: int) -> tuple[np.ndarray, float]:
    """Their train.py in a scratch directory (it writes its loss per epoch to a text file there)."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [python, str(Path(code, "train.py")), "--model", "attnS", "--head_num", str(HEADS),
                "--epoch", str(epochs), "--lr", str(LR), "--init", str(INIT), "--trainset_size", str(n),
                "--seq_len", str(CONTEXT + 1), "--in_dim", str(D), "--seed", str(seed)]  # fmt: skip
        env = {**os.environ, "MPLBACKEND": "Agg"}
        t = time.perf_counter()
        subprocess.run(args, check=True, capture_output=True, cwd=tmp, env=env)
        wall = time.perf_counter() - t
        out = Path(tmp, f"attnS_head{HEADS}_D{D}_R1_P{n}_N{CONTEXT + 1}_seed{seed}.txt")
        return np.loadtxt(out), wall


def _row(name: str, loss: np.ndarray, wall: float, tol: float) -> list[str]:
    levels, exits = _levels(loss, tol)
    gaps = [min(abs(v - SADDLES)) for v in levels]
    return [name, ", ".join(f"{v:.4f}" for v in levels), f"{max(gaps):.1e}",
            ", ".join(f"{e:.0f}" for e in exits), f"{wall:.1f}"]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--their-code", help="a checkout of yedizhang/linattn-icl")
    ap.add_argument("--their-python", default=sys.executable, help="a Python with torch (default: this one)")
    ap.add_argument("--epochs", type=int, default=10001)
    ap.add_argument("--sequences", type=int, default=5000, help="P, their --trainset_size")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--plot", default="runs/bench_linear_attention.png")
    args = ap.parse_args()
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}; D = {D}, "
          f"N = {CONTEXT}, {HEADS} heads, rank one, lr {LR}, init {INIT}, {args.epochs} epochs, "
          f"P = {args.sequences}")  # fmt: skip
    print("saddles L(M_0..4): " + ", ".join(f"{v:.5f}" for v in SADDLES))
    # attnsim's flow at figure 23's settings: the time a user waits, median of 5 and the spread
    walls = []
    for _ in range(5):
        t = time.perf_counter()
        attnsim.simulate({"model": "linear_attention", "init_scale": 1e-6, "steps": 10**8})
        walls.append(time.perf_counter() - t)
    print(f"attnsim flow from init 1e-6 to t = 1e8 (every plateau): median {statistics.median(walls):.2f} s "
          f"(min {min(walls):.2f}, max {max(walls):.2f}, 5 runs)")  # fmt: skip
    print()
    print("| run | plateau levels | largest gap to a saddle | left at epochs | wall s |")
    print("|---|---|---|---|---|")
    curves = {}
    for seed in args.seeds:
        loss, wall = attnsim_run(args.epochs, 0, seed)
        print("| " + " | ".join(_row(f"attnsim, population, seed {seed}", loss, wall, 1e-3)) + " |")
        loss, wall = attnsim_run(args.epochs, args.sequences, seed)
        curves[f"attnsim seed {seed}"] = loss
        print(
            "| "
            + " | ".join(_row(f"attnsim, {args.sequences} sequences, seed {seed}", loss, wall, 5e-2))
            + " |"
        )
        if args.their_code:
            loss, wall = their_run(args.their_code, args.their_python, args.epochs, args.sequences, seed)
            curves[f"theirs seed {seed}"] = loss
            print("| " + " | ".join(_row(f"theirs (torch float32), seed {seed}", loss, wall, 5e-2)) + " |")
        sys.stdout.flush()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    for v in SADDLES:
        ax.axhline(v, color="0.6", ls=":", lw=0.8)
    for i, (name, loss) in enumerate(curves.items()):
        ls = "--" if name.startswith("theirs") else "-"
        ax.plot(np.arange(loss.size), loss, lw=1, color=f"C{i}", ls=ls, label=name)
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss")
    ax.set_title(f"ATTN_S, {HEADS} heads, rank one, P = {args.sequences}", fontsize=10)
    ax.legend(fontsize=7)
    Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.plot, dpi=110)
    print(f"\nwrote {args.plot}")


if __name__ == "__main__":
    main()
