"""Figure 10: attention dynamics of the one-layer Transformer encoder (the
paper's appendix): every data token's score under the CLS query, for one clean
and one noisy training sample, in the three settings of figure 2, 1000 steps
of gradient descent on every parameter."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ..plotting import plot_sample_scores
from .common import save, sweep_records, write_numbers
from .fig2_dynamics import SETTINGS

SAVE = ["example_scores", "example_index", "roles", "score_cls", "train_loss"]


def records(quick: bool, cache: Path) -> dict[str, dict]:
    base = {"model": "encoder", "steps": 100 if quick else 1000, "log_every": 5, "pop_log_points": 2}
    if quick:
        base.update(mlp_dim=64, test_n=200)
    points = [{**over, "d": min(over["d"], 300)} if quick else over for over in SETTINGS.values()]
    recs = sweep_records(cache, "fig10_encoder", base, {}, [0], SAVE, points=points)  # one worker per setting
    key = lambda c: (c["d"], c["signal_norm"])
    by = {key(r["config"]): r for r in recs}
    return {label: by[key(p)] for label, p in zip(SETTINGS, points)}


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    data = records(quick, cache)
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), sharey=True)
    lines = []
    for col, (label, r) in enumerate(data.items()):
        tr, f, c = r["trajectory"], r["final"], r["config"]
        steps = np.asarray(tr["step"])
        ex = np.array(tr["example_scores"], dtype=float)  # (L, 2, T)
        roles = np.array(tr["roles"])
        for row, kind in enumerate(("clean", "noisy")):
            i = tr["example_index"][row]
            title = f"{label} (d={c['d']}, |mu|={c['signal_norm']:g}): {kind} sample {i}"
            plot_sample_scores(axes[row, col], steps, ex[:, row], roles[i], title)
        i = tr["example_index"][1]
        opp = ex[:, 1][:, roles[i] == 2].sum(axis=1)
        note = f"train acc {f['train_acc']:.3f}, test acc {f['test_acc']:.3f}\nregime: {f['regime']}"
        axes[1, col].text(0.02, 0.97, note, transform=axes[1, col].transAxes, va="top", fontsize=8)
        lines.append(
            f"{label} (d={c['d']}, |mu|={c['signal_norm']:g}, mlp_dim={c['mlp_dim']}): train loss "
            f"{f['train_loss']:.3g}, train accuracy {f['train_acc']:.3f} (noisy fitted "
            f"{f['n_fitted_noisy']} of {f['n_noisy']}), test loss {f['test_loss']:.3g}, "
            f"test accuracy {f['test_acc']:.3f} "
            f"({c['test_n']} fresh samples), regime {f['regime']}; the noisy example's score on its opposite "
            f"weakly relevant token {opp[-1]:.3f} at step {steps[-1]}, the CLS self-attention "
            f"{tr['score_cls'][-1]:.3f} (mean over samples)"
        )
    fig.suptitle("one-layer Transformer encoder: CLS attention on the data tokens (every parameter trained)",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    return [
        save(fig, outdir / "fig10_encoder_dynamics.png"),
        write_numbers(outdir, "fig10_encoder_dynamics", lines),
    ]
