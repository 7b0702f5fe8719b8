"""Figure 2: attention dynamics of one clean and one noisy sample in the
paper's three settings (balanced, large noise, large signal)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnsim.metrics import format_error
from attnsim.plotting import plot_sample_scores, role_legend
from attnsim.run import simulate

from .common import MU, save, write_numbers

SETTINGS = {
    "balanced": {"d": 2000, "signal_norm": 20.0},
    "large noise": {"d": 4500, "signal_norm": 5.0},
    "large signal": {"d": 1000, "signal_norm": 100.0},
}


def make(outdir: Path, quick: bool = False, cache: Path | None = None) -> list[Path]:
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), sharey=True)
    lines = []
    for col, (label, over) in enumerate(SETTINGS.items()):
        res = simulate({**over, "steps": 300 if quick else 1000, "log_every": 5, "test_n": 1000})
        tr, f = res.trajectory, res.final
        i = tr["example_index"][1]
        on_rel = (tr["selected_role"][:, i] == 0) & (
            tr["step"] > 0
        )  # noisy example selects its relevant token
        until = tr["step"][on_rel][-1] if on_rel.any() else "never"
        fits = tr["fit_step"][tr["y"] != tr["y_clean"]]
        first_fit = int(fits[fits >= 0].min()) if np.any(fits >= 0) else "never"
        error = format_error(f["pop_error"], f["pop_error_se"], f["pop_error_resolved"])
        twin = format_error(f["error_clean_twin"], f["error_clean_twin_se"], f["error_clean_twin_resolved"])
        lines.append(
            f"{label} (d={over['d']}, |mu|={over['signal_norm']:g}): train accuracy {f['train_acc']:.3f}, "
            f"test accuracy {f['test_acc']:.3f} (1000 fresh samples), population error {error} "
            f"(Bayes error {f['bayes_error']:.2g}; clean-label twin {twin}; at initialization "
            f"{f['pop_error_init']:.2g}), regime {f['regime']}, "
            f"{'generalizes' if f['generalized'] else 'does not generalize'}, noisy samples fitted "
            f"{f['n_fitted_noisy']} of {f['n_noisy']} (the first from step {first_fit}), memorized at step "
            f"{res.final['t_memorize']}; the noisy example last selects its relevant token at step {until}"
        )
        for row, kind in enumerate(("clean", "noisy")):
            i = tr["example_index"][row]
            title = f"{label} ($d$={over['d']}, {MU}={over['signal_norm']:g}): {kind} sample {i}"
            ex = tr["example_scores"][:, row]
            plot_sample_scores(
                axes[row, col], tr["step"], ex, tr["roles"][i], title, legend=False, headroom=0.42
            )
        axes[1, col].text(
            0.02,
            0.98,
            f"train acc {f['train_acc']:.3f}, test acc {f['test_acc']:.3f}\n"
            f"population error {error}\nclean-label twin {twin}\n"
            f"regime: {f['regime']}",
            transform=axes[1, col].transAxes,
            va="top",
            fontsize=8,
        )
    fig.tight_layout(rect=role_legend(fig, axes[0, 0]))
    return [save(fig, outdir / "fig2_dynamics.png"), write_numbers(outdir, "fig2_dynamics", lines)]
