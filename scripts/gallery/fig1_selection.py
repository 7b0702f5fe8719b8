"""Figure 1: which token each sample selects, projected on the (mu+, mu-) axes,
for training (top) and test samples (bottom).

The paper builds p by hand: W = I and p = mu+ + mu- + c sum_i xi_i, xi_i the
noise of the token sample i should select (the opposite weakly relevant token
for noisy samples, the relevant one for clean samples); c = 1, 0.06, 0.001 give
harmful, benign and not-overfitting selections. Accuracy is by hard selection:
the argmax token, then the sign of its value x . nu. A second figure shows the
same picture for trained models (the three settings of figure 2).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnsim.config import Config
from attnsim.data.dataset import RELEVANT, ROLE_NAMES, WEAK_OPPOSITE, make_streams
from attnsim.data.synthetic import clean_labels, draw_tokens, generate
from attnsim.plotting import ROLE_COLORS
from attnsim.run import simulate

from .common import save, write_numbers
from .fig2_dynamics import SETTINGS

HAND_C = {"harmful": 1.0, "benign": 0.06, "not overfitting": 0.001}


def _scatter(ax, coords, roles_sel, correct, title):
    for code, name in enumerate(ROLE_NAMES):
        m = roles_sel == code
        if m.any():
            ax.scatter(
                coords[m, 0],
                coords[m, 1],
                s=12,
                color=ROLE_COLORS[name],
                marker="o",
                edgecolors=np.where(correct[m], "none", "k"),
            )
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(r"$x \cdot \mu_+ / \|\mu\|$")
    ax.set_ylabel(r"$x \cdot \mu_- / \|\mu\|$")


def hand_built(quick: bool) -> dict:
    n, d = (40, 2000) if quick else (100, 10000)
    cfg = Config(n=n, d=d, T=8, signal_norm=20.0, rho=0.2, noise_rate=0.2)
    streams = make_streams(0)
    ds = generate(cfg, streams)
    y_test = clean_labels(n)
    X_test, roles_test = draw_tokens(cfg, y_test, streams.test)
    noisy = ds.noisy
    target = np.where(noisy, WEAK_OPPOSITE, RELEVANT)
    idx = np.array([np.flatnonzero(ds.roles[i] == target[i])[0] for i in range(n)])
    xi = ds.X[np.arange(n), idx].copy()
    xi[:, :2] = 0.0  # the noise part of the token (signals live on e1, e2)
    out = {}
    for label, c in HAND_C.items():
        p = ds.mu_pos + ds.mu_neg + c * xi.sum(axis=0)
        rows = []
        for X, y, roles in ((ds.X, ds.y, ds.roles), (X_test, y_test, roles_test)):
            sel = (X @ p).argmax(axis=1)
            tok = X[np.arange(X.shape[0]), sel]
            pred = np.sign(tok @ ds.nu)
            # coordinates on e1 = mu+/|mu| and e2 = mu-/|mu|: x . mu+- / |mu|, as the axes say
            rows.append((tok[:, :2].copy(), roles[np.arange(X.shape[0]), sel], pred == y))
        out[label] = rows
    return out


def trained(quick: bool) -> dict:
    out = {}
    for label, over in SETTINGS.items():
        res = simulate(
            {**over, "steps": 300 if quick else 1000, "test_n": 100, "log_every": 1000, "clean_twin": False}
        )
        pb, st = res.problem, res.state
        e1, e2 = pb.mu_pos / over["signal_norm"], pb.mu_neg / over["signal_norm"]
        q = st["W"] @ st["p"]
        rows = []
        T = pb.T
        z = (pb.X2 @ q).reshape(-1, T)
        sel = z.argmax(axis=1)
        tok = pb.X2.reshape(-1, T, pb.k)[np.arange(sel.size), sel]
        f = res.trajectory["y"]
        rows.append(
            (
                np.stack([tok @ e1, tok @ e2], 1),
                res.trajectory["roles"][np.arange(sel.size), sel],
                np.sign(tok @ st["nu"]) == f,
            )
        )
        zt = (pb.X2_test @ q + (pb.O_test @ st["p"] if pb.O_test is not None else 0)).reshape(-1, T)
        selt = zt.argmax(axis=1)
        tokt = pb.X2_test.reshape(-1, T, pb.k)[np.arange(selt.size), selt]
        # test roles follow the fixed template (shuffle_roles is off)
        template = res.trajectory["roles"][0]
        rows.append(
            (np.stack([tokt @ e1, tokt @ e2], 1), template[selt], np.sign(tokt @ st["nu"]) == pb.y_test)
        )
        out[label] = rows
    return out


def _figure(data, title):
    fig, axes = plt.subplots(2, 3, figsize=(12, 7))
    for col, (label, rows) in enumerate(data.items()):
        for row, (coords, roles, correct) in enumerate(rows):
            which = "train" if row == 0 else "test"
            _scatter(axes[row, col], coords, roles, correct, f"{label}: {which} acc {correct.mean():.2f}")
    # one legend for the figure, with every role (a panel shows only the roles its samples select)
    handles = [
        plt.Line2D([], [], ls="", marker="o", color=ROLE_COLORS[name], label=name) for name in ROLE_NAMES
    ]
    handles.append(
        plt.Line2D([], [], ls="", marker="o", color="w", markeredgecolor="k", label="misclassified")
    )
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle(title + " (black edge: misclassified by the selected token)", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def make(outdir: Path, quick: bool = False, cache: Path | None = None) -> list[Path]:
    hand, fit = hand_built(quick), trained(quick)
    a = _figure(hand, r"hand-built $p = \mu_+ + \mu_- + c \sum_i \xi_i$, $W = I$ ($c$ = 1, 0.06, 0.001)")
    b = _figure(fit, "trained W, p (1000 GD steps; settings of figure 2)")
    lines = [
        f"{kind} {label}: train accuracy {rows[0][2].mean():.2f}, test accuracy {rows[1][2].mean():.2f} "
        "(hard selection: the argmax token's value)"
        for kind, data in (("hand-built", hand), ("trained", fit))
        for label, rows in data.items()
    ]
    return [
        save(a, outdir / "fig1_selection_hand.png"),
        save(b, outdir / "fig1_selection_trained.png"),
        write_numbers(outdir, "fig1_selection", lines),
    ]
