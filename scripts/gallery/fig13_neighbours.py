"""Figure 13: the neighbouring theories side by side, each the experiment its
paper makes its point with, run by attnsim (with label noise), the paper's
statement or number beside it.

(a) Sakamoto & Sato 2025 (this paper's setting): the default run's token
    scores of a clean and a noisy training sample and its population error.
(b) Magen et al. 2025 (preset magen2025): population error after two GD
    steps over (n, SNR), the edges of the benign band as SNR = c / sqrt(n)
    (figure 16's sweep).
(c) Tarzanagh et al. 2023 (preset tarzanagh2023): cos(q, q_mm) under
    normalized GD against plain GD's flow (figure 15's runs).
(d) Jiang et al. 2024: their boundary N SNR^2 = const (their model is not
    attnsim's) drawn through the edges of attnsim's benign band (figure 6's
    sweep), with what a free fit of the crossings says of that form.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnsim.metrics import format_error
from attnsim.plotting import ROLE_COLORS, cell_edges, describe_fit, draw_boundary
from attnsim.run import simulate

from . import fig6_phase, fig15_normalized, fig16_magen
from .common import SNR, save, write_numbers


def sweeps(quick: bool) -> list[dict]:
    """The sweeps this figure reads: figures 6, 15 and 16's."""
    return [*fig6_phase.sweeps(quick), *fig15_normalized.sweeps(quick), *fig16_magen.sweeps(quick)]


def fig6_phase_describe(fit: dict) -> str:
    """A fitted edge as figure 6 states it (the free law, and Jiang et al.'s form through it)."""
    return describe_fit(fit) + fig6_phase._fixed(fit)


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    fig, grid = plt.subplots(2, 2, figsize=(13, 10.5), layout="constrained")
    axes = grid.ravel()
    lines = []
    # (a) the paper's own setting
    r = simulate({"steps": 300 if quick else 1000, "log_every": 10})
    tr, f = r.trajectory, r.final
    err = format_error(f["pop_error"], f["pop_error_se"], f["pop_error_resolved"])
    ex = tr["example_scores"]  # (log points, [clean, noisy], T)
    for k, (name, ls) in enumerate((("clean", "-"), ("noisy", "--"))):  # tokens: the default roles' order
        for t, role in ((0, "relevant"), (1, "weak_aligned"), (2, "weak_opposite")):
            axes[0].plot(tr["step"], ex[:, k, t], color=ROLE_COLORS[role], ls=ls, label=f"{name}: {role}")
        axes[0].plot(
            tr["step"],
            ex[:, k, 3:].max(axis=1),
            color=ROLE_COLORS["irrelevant"],
            ls=ls,
            label=f"{name}: largest irrelevant",
        )
    axes[0].set_xlabel("steps")
    axes[0].set_ylabel("softmax score")
    axes[0].legend(fontsize=7, ncol=2)
    axes[0].set_title(
        f"(a) Sakamoto & Sato 2025: {f['regime']}, population error {err}\n"
        "(their run at these settings: train acc 1.0, test acc 0.996)",
        fontsize=11,
    )
    lines.append(
        f"(a) default run: regime {f['regime']}, population error {err}, train "
        f"accuracy {f['train_acc']:.3f}, noisy fitted {f['n_fitted_noisy']} of {f['n_noisy']}; the "
        "authors' notebook: train 1.0, test 0.996 (d = 2000, |mu| = 20, 1000 steps)"
    )
    # (b) Magen et al.
    magen_lines, _ = fig16_magen.draw(axes[1], fig16_magen.records(quick, cache))
    axes[1].set_title(
        r"(b) Magen et al. 2025: the two-step benign band (their claim: SNR $\propto 1/\sqrt{n}$)",
        fontsize=11,
    )
    lines += [f"(b) {v}" for v in magen_lines[:2]]
    # (c) Tarzanagh et al.
    tz_lines = fig15_normalized.draw(axes[2], fig15_normalized.runs(quick, cache))
    axes[2].set_title("(c) Tarzanagh et al. 2023: normalized GD reaches the $p$-SVM direction", fontsize=11)
    lines += [f"(c) {v}" for v in tz_lines]
    # (d) Jiang et al.: their boundary on attnsim's phase diagram
    recs = fig6_phase.records(quick, cache, fig6_phase.READINGS[0])
    ns = sorted({r["config"]["n"] for r in recs})
    mus = sorted({r["config"]["signal_norm"] for r in recs})
    snr = np.array(mus) / np.sqrt(2000)
    frac = fig6_phase.benign_fraction(recs, ns, mus)
    im = axes[3].pcolormesh(
        cell_edges(snr), cell_edges(np.array(ns, dtype=float)), frac, cmap="Greens", vmin=0, vmax=1
    )
    fig.colorbar(im, ax=axes[3], label="fraction of seeds benign")
    found = fig6_phase.edges(recs)
    for edge, fit in found.items():
        color, marker = fig6_phase.EDGE_STYLE[edge]
        axes[3].plot(fit["cross"], fit["rows"], marker, color=color, ms=7, mew=1.5, label=f"{edge} edge")
        if fit["fixed"]["points"] >= 1:  # Jiang et al.'s form through attnsim's crossings
            c = fit["fixed"]["c"] ** 2
            draw_boundary(
                axes[3],
                lambda n, c=c: np.sqrt(c / n),
                np.geomspace(ns[0], ns[-1], 50),
                independent="y",
                color=color,
                lw=1,
                label=f"$N\\,\\mathrm{{SNR}}^2$ = {c:.2f} through them",
            )
    axes[3].legend(fontsize=7, loc="upper right")
    axes[3].set_xscale("log")
    axes[3].set_yscale("log")
    axes[3].set_xlabel(SNR)
    axes[3].set_ylabel("$n$")
    axes[3].set_title(
        r"(d) Jiang et al. 2024's form $N\,\mathrm{SNR}^2 = c$ through attnsim's band edges"
        "\n(1000 steps, $d$ = 2000; their model is not attnsim's)",
        fontsize=11,
    )
    for edge, fit in found.items():
        lines.append(f"(d) {edge} edge after 1000 steps, SNR = c n^b: {fig6_phase_describe(fit)}")
    return [save(fig, outdir / "fig13_neighbours.png"), write_numbers(outdir, "fig13_neighbours", lines)]
