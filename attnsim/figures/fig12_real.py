"""Figure 12 and the Table-2 analog: the paper's fine-tuning protocol on real
data (the handwritten digits, digits 0-4 against 5-9; see
:mod:`attnsim.realdata`). For n in {20, 200, all 997 of the pool} and label
noise eta in {0, 0.2}, 3 seeds (each its own split, head and flips), W and p
trained by gradient descent for ``STEPS`` steps, logged on a log grid:
test accuracy and the fraction of flipped labels fitted against steps, and
the table at the last step next to the head-only baseline (uniform attention).

The feature dimension is ``D`` = 32: a step at n = 997 (16 000 tokens) costs
about 0.3 ms at d = 32, 1 ms at d = 64 and 30-40 ms at d = 2000 on this
machine, and the 18 runs of 10^5 steps must fit the figure's 5 minutes.
``attnsim real digits --set d=2000`` runs the same protocol at any d (the
README's second table: d = 2000, 1000 steps)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ..realdata import format_table, protocol_sweep, protocol_table, write_table
from .common import save, write_numbers

D = 32
STEPS = 100_000
NS = [20, 200, 1000]
ETAS = [0.0, 0.2]
SEEDS = [0, 1, 2]


def records(quick: bool, cache: Path) -> tuple[list[dict], list[str]]:
    from ..sweep import parse_sweep, run_sweep

    ns, steps = ([10, 40], 2000) if quick else (NS, STEPS)
    base = {"d": 32 if quick else D, "steps": steps}
    mapping, messages = protocol_sweep("digits", ns, ETAS, SEEDS[:2] if quick else SEEDS, base, "fig12_real")
    report = run_sweep(parse_sweep(mapping), cache, progress=None)
    return [r for r in report.records() if r.get("status") == "ok"], messages


def dips(recs: list[dict]) -> list[str]:
    """Where the mean test accuracy over seeds is lowest, and the first later
    step at which it is above the head-only baseline (delayed generalization)."""
    out = []
    for n in sorted({r["config"]["n"] for r in recs}):
        for eta in ETAS:
            rs = [r for r in recs if r["config"]["n"] == n and r["config"]["noise_rate"] == eta]
            if not rs:
                continue
            steps = np.asarray(rs[0]["trajectory"]["step"])
            v = np.array([r["trajectory"]["test_acc"] for r in rs], dtype=float)
            ok = np.isfinite(v).all(axis=0)
            steps, mean = steps[ok], v[:, ok].mean(axis=0)
            i = int(np.argmin(mean))
            above = np.flatnonzero(mean[i:] > mean[0])
            back = (
                f"above the baseline from step {steps[i + above[0]]}" if above.size else "never back above it"
            )
            low = f"lowest {mean[i]:.3f} at step {steps[i]}"
            out.append(f"n={n}, eta={eta:g}: mean test accuracy {mean[0]:.3f} at step 0, {low}, {back}, "
                       f"{mean[-1]:.3f} at step {steps[-1]}")  # fmt: skip
    return out


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    recs, messages = records(quick, cache)
    ns = sorted({r["config"]["n"] for r in recs})
    fig, axes = plt.subplots(2, len(ns), figsize=(4.6 * len(ns), 6.5), sharex=True, squeeze=False)
    for col, n in enumerate(ns):
        for i, eta in enumerate(ETAS):
            rs = [r for r in recs if r["config"]["n"] == n and r["config"]["noise_rate"] == eta]
            if not rs:
                continue
            steps = np.maximum(np.asarray(rs[0]["trajectory"]["step"], dtype=float), 1.0)
            for row, key in enumerate(("test_acc", "train_acc_noisy")):
                if key == "train_acc_noisy" and eta == 0:
                    continue
                v = np.array([r["trajectory"][key] for r in rs], dtype=float)
                ok = np.isfinite(v).all(axis=0)  # the points where every seed logged this metric
                v, x = v[:, ok], steps[ok]
                axes[row, col].plot(x, v.mean(axis=0), color=f"C{i}", label=f"eta = {eta:g}")
                axes[row, col].fill_between(x, v.min(axis=0), v.max(axis=0), color=f"C{i}", alpha=0.2)
            base = np.mean([r["trajectory"]["test_acc"][0] for r in rs])
            axes[0, col].axhline(base, color=f"C{i}", ls=":", lw=1, label=f"head only (eta = {eta:g})")
        axes[0, col].set_title(
            f"n = {n}: test accuracy ({rs[0]['engine']['test_n']} clean images)", fontsize=10
        )
        axes[1, col].set_title(f"n = {n}: flipped labels fitted", fontsize=10)
        axes[1, col].set_ylim(-0.02, 1.02)
        for ax in axes[:, col]:
            ax.set_xscale("log")
        axes[1, col].set_xlabel("step")
    axes[0, 0].legend(fontsize=7)
    c = recs[0]["config"]
    seeds = sorted({r["config"]["seed"] for r in recs})
    fig.suptitle(
        f"real data: handwritten digits 0-4 vs 5-9, T = {c['T']} patch tokens in d = {c['d']}, head fitted "
        f"on clean images and frozen, W and p trained (mean and min-max of {len(seeds)} seeds)",
        fontsize=10,
    )
    fig.tight_layout()
    rows = protocol_table(recs)
    lines = [
        *messages,
        f"d = {c['d']}, {c['steps']} steps, lr {c['lr']:g}, seeds {seeds}",
        format_table(rows),
        *dips(recs),
    ]
    return [
        save(fig, outdir / "fig12_real.png"),
        write_table(rows, outdir / "fig12_real_table.csv"),
        write_numbers(outdir, "fig12_real", lines),
    ]
