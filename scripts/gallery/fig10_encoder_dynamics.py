"""Figure 10: attention dynamics of the one-layer Transformer encoder (the
paper's appendix): every data token's score under the CLS query, for one clean
and one noisy training sample, in the three settings of figure 2 with the
paper's d = 5000 for large noise, 1000 steps of gradient descent on every
parameter.

Figures 10 and 11 share one sweep (:func:`encoder_records`): the long
d = 5000 run goes first and the heatmap's grid fills the other worker."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnsim.plotting import plot_sample_scores, role_legend

from .common import MU, records_of, save, sweep_mapping, write_numbers
from .fig2_dynamics import SETTINGS

SAVE = ["example_scores", "example_index", "roles", "score_cls", "train_loss"]


# the heatmap's grid (figure 11): as large as the ten-minute budget of both figures allows
GRID = {"signal_norm": [5.0, 10.0, 15.0, 20.0, 30.0, 50.0, 100.0], "d": [250, 500, 750, 1000]}
QUICK_GRID = {"signal_norm": [5.0, 20.0, 100.0], "d": [64, 128]}
ENCODER_SETTINGS = {**SETTINGS, "large noise": {"d": 5000, "signal_norm": 5.0}}  # figure 2's (5000, 5)
SETTINGS_ORDER = ("large noise", "balanced", "large signal")  # longest first


def _points(quick: bool) -> tuple[list[dict], list[dict]]:
    """(figure 10's points, in SETTINGS_ORDER; figure 11's grid cells)."""
    settings = [ENCODER_SETTINGS[k] for k in SETTINGS_ORDER]
    dyn = [{**over, "d": min(over["d"], 300) if quick else over["d"], "log_every": 5} for over in settings]
    grid = QUICK_GRID if quick else GRID
    cells = [{"signal_norm": m, "d": d, "log_every": 1000} for d in grid["d"] for m in grid["signal_norm"]]
    return dyn, cells


def sweeps(quick: bool) -> list[dict]:
    """Figures 10 and 11's one sweep."""
    base = {"model": "encoder", "steps": 100 if quick else 1000, "pop_log_points": 2}
    if quick:
        base.update(mlp_dim=64, test_n=200)
    dyn, cells = _points(quick)
    return [sweep_mapping("encoder", base, {}, [0], SAVE, points=dyn + cells)]


def encoder_records(quick: bool, cache: Path) -> tuple[dict[str, dict], list[dict]]:
    """(figure 10's records by setting, figure 11's grid records), from one sweep."""
    dyn, cells = _points(quick)
    recs = records_of(cache, *sweeps(quick))
    key = lambda c: (c["d"], c["signal_norm"], c["log_every"])
    by = {key(r["config"]): r for r in recs}
    dynamics = {label: by[key(p)] for label, p in zip(SETTINGS_ORDER, dyn)}
    return {k: dynamics[k] for k in ENCODER_SETTINGS}, [by[key(c)] for c in cells if key(c) in by]


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    data, _ = encoder_records(quick, cache)
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), sharey=True)
    lines = []
    for col, (label, r) in enumerate(data.items()):
        tr, f, c = r["trajectory"], r["final"], r["config"]
        steps = np.asarray(tr["step"])
        ex = np.array(tr["example_scores"], dtype=float)  # (L, 2, T)
        roles = np.array(tr["roles"])
        for row, kind in enumerate(("clean", "noisy")):
            i = tr["example_index"][row]
            title = f"{label} ($d$={c['d']}, {MU}={c['signal_norm']:g}): {kind} sample {i}"
            plot_sample_scores(
                axes[row, col], steps, ex[:, row], roles[i], title, legend=False, headroom=0.25
            )
        i = tr["example_index"][1]
        opp = ex[:, 1][:, roles[i] == 2].sum(axis=1)
        note = f"train acc {f['train_acc']:.3f}, test acc {f['test_acc']:.3f}\nregime: {f['regime']}"
        axes[1, col].text(0.02, 0.98, note, transform=axes[1, col].transAxes, va="top", fontsize=8)
        names = ("relevant", "weak_aligned", "weak_opposite", "irrelevant")
        roles_end = ", ".join(f"{name.replace('_', ' ')} {f[f'score_noisy_{name}']:.3f}" for name in names)
        lines.append(
            f"{label} (d={c['d']}, |mu|={c['signal_norm']:g}, mlp_dim={c['mlp_dim']}): train loss "
            f"{f['train_loss']:.3g}, train accuracy {f['train_acc']:.3f} (noisy fitted "
            f"{f['n_fitted_noisy']} of {f['n_noisy']}), test loss {f['test_loss']:.3g}, "
            f"test accuracy {f['test_acc']:.3f} "
            f"({c['test_n']} fresh samples), regime {f['regime']}; the noisy example's score on its opposite "
            f"weakly relevant token {opp[-1]:.3f} at step {steps[-1]}; mean scores of the noisy samples on "
            f"each role: {roles_end}; the CLS self-attention {tr['score_cls'][-1]:.3f} (mean over samples)"
        )
    fig.suptitle(
        "one-layer Transformer encoder: CLS attention on the data tokens (every parameter trained)",
        fontsize=10,
    )
    fig.tight_layout(rect=role_legend(fig, axes[0, 0]))
    return [
        save(fig, outdir / "fig10_encoder_dynamics.png"),
        write_numbers(outdir, "fig10_encoder_dynamics", lines),
    ]
