"""Figure 14: collapse at large label noise (the paper's first-version
experiment, main_math_frak.py and its notebook). p trained alone with W = I,
T = 32 tokens (2 relevant, 2 weakly relevant of each kind, 26 irrelevant),
rho = 0.1, n = 100, balanced flips, lr = 5e-3, 1000 steps (the script's
defaults; the notebook does not say which it ran), eta from 0 to 0.9, at the
two cases the notebook prints (d = 12000, |mu| = 120 and d = 6000, |mu| = 100;
its grid also had |mu| = 20, 60: left out, a T = 32, n = 100 run streams the
41 MB nonzero half of an 82 MB token matrix per step). Against eta: the population error,
the frakS ratio (the sums of s_rel (1 - s_rel) over clean and over noisy
samples, as the notebook divides them) and the training accuracy, with the
notebook's numbers at d = 12000, |mu| = 120 beside attnsim's (seeds 0-2 there)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnsim.metrics import format_error

from .common import ETA, FRAK_S, MU, records_of, save, sweep_mapping, write_numbers

BASE = {
    "T": 32,
    "n_relevant": 2,
    "n_weak_aligned": 2,
    "n_weak_opposite": 2,
    "rho": 0.1,
    "n": 100,
    "train": "p",
    "init_W": "identity",
    "label_noise": "balanced",
    "lr": 5e-3,
    "steps": 1000,
    "log_every": 100,
    "pop_log_points": 2,
    "clean_twin": False,
}
ETAS = (0.0, 0.05, 0.1, 0.2, 0.4, 0.6, 0.65, 0.7, 0.8, 0.9)
# The notebook's printout (first version, d = 12000, |mu| = 120, seed 0): eta -> (frakS ratio of
# clean class-1 to noisy class-2 sums, train accuracy, test accuracy on 1000 samples)
NOTEBOOK = {
    0.05: (21.51, 0.96, 1.0),
    0.1: (7.740, 0.90, 1.0),
    0.15: (4.891, 0.86, 1.0),
    0.2: (1.659, 0.86, 0.999),
    0.25: (1.622, 0.88, 0.995),
    0.3: (1.573, 0.84, 0.995),
    0.35: (1.544, 0.81, 0.994),
    0.4: (1.507, 0.80, 0.992),
    0.45: (1.487, 0.78, 0.99),
    0.5: (1.451, 0.74, 0.989),
    0.55: (1.412, 0.75, 0.986),
    0.6: (1.388, 0.71, 0.986),
    0.65: (0.783, 0.87, 0.579),
    0.7: (0.505, 0.84, 0.505),
    0.75: (0.399, 0.83, 0.499),
    0.8: (0.273, 0.80, 0.495),
    0.85: (0.205, 0.79, 0.493),
    0.9: (0.118, 0.81, 0.486),
}
FOCUS = (12000, 120.0)
CASES = ((12000, 120.0), (6000, 100.0))  # the notebook's printed cases (one seed, like its runs)
EDGE = (0.6, 0.65, 0.7)  # where the collapse sits: two more seeds


def sweeps(quick: bool) -> list[dict]:
    if quick:
        quick_base = {**BASE, "T": 16, "d": 1000}
        return [
            sweep_mapping(
                "fig14_collapse", quick_base, {"signal_norm": [60.0], "noise_rate": [0.05, 0.6, 0.7]}, [0]
            )
        ]
    grid = {"noise_rate": list(ETAS)}
    out = [
        sweep_mapping(f"fig14_collapse_{d}_{mu:g}", {**BASE, "d": d, "signal_norm": mu}, grid, [0])
        for d, mu in CASES
    ]
    focus = {**BASE, "d": FOCUS[0], "signal_norm": FOCUS[1]}
    return out + [sweep_mapping("fig14_collapse_seeds", focus, {"noise_rate": list(EDGE)}, [1, 2])]


def records(quick: bool, cache: Path) -> list[dict]:
    return records_of(cache, *sweeps(quick))


def _summary(eta: float, f: dict) -> str:
    err = format_error(f["pop_error"], f["pop_error_se"], f["pop_error_resolved"])
    return f"eta {eta:g}: error {err}, frakS ratio {_ratio(f):.3g}, train acc {f['train_acc']:.2f}"


def _ratio(f: dict) -> float:
    return f["frakS_clean"] / f["frakS_noisy"] if f["frakS_noisy"] else np.nan


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    recs = records(quick, cache)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6), layout="constrained")
    combos = sorted({(r["config"]["d"], r["config"]["signal_norm"]) for r in recs})
    lines = [
        "the paper's first version (its notebook): frakS ratio ~20 at eta 0.05, 1.3-1.7 at 0.2-0.6, "
        "below 1 beyond; test accuracy at d = 12000, |mu| = 120: 0.986 at 0.6, 0.579 at 0.65, "
        "0.505 at 0.7"
    ]
    for i, (d, mu) in enumerate(combos):
        rows = sorted(
            (r for r in recs if (r["config"]["d"], r["config"]["signal_norm"]) == (d, mu)),
            key=lambda r: (r["config"]["seed"], r["config"]["noise_rate"]),
        )
        for seed in sorted({r["config"]["seed"] for r in rows}):
            run = [r for r in rows if r["config"]["seed"] == seed]
            eta = np.array([r["config"]["noise_rate"] for r in run])
            fin = [r["final"] for r in run]
            first = seed == 0
            style = {
                "color": f"C{i}",
                "marker": "o" if first else None,
                "ms": 3,
                "lw": 1.5 if first else 0.6,
                "label": f"$d$={d}, {MU}={mu:g}" if first else None,
            }
            axes[0].plot(eta, [f["pop_error"] for f in fin], **style)
            axes[1].plot(eta, [_ratio(f) for f in fin], **style)
            axes[2].plot(eta, [f["train_acc"] for f in fin], **style)
            lines.append(f"attnsim d={d}, |mu|={mu:g}, seed {seed}: " + "; ".join(map(_summary, eta, fin)))
    nb = np.array(sorted(NOTEBOOK))
    vals = np.array([NOTEBOOK[e] for e in nb])
    for ax, col, what in (
        (axes[0], 1.0 - vals[:, 2], "test error"),
        (axes[1], vals[:, 0], f"{FRAK_S} ratio"),
        (axes[2], vals[:, 1], "train accuracy"),
    ):
        ax.plot(nb, col, "k*", ms=7, label=f"notebook, $d$=12000, {MU}=120 ({what})")
        ax.set_xlabel(f"label noise rate {ETA}")
    axes[0].set_ylabel("population error (clean labels)")
    axes[1].set_ylabel(f"{FRAK_S} clean / {FRAK_S} noisy (sums)")
    axes[1].set_yscale("log")
    axes[1].axhline(1.0, color="k", lw=0.6, ls=":")
    axes[2].set_ylabel("training accuracy (observed labels)")
    for ax in axes:
        ax.grid(lw=0.3)
    axes[0].legend(fontsize=7)
    axes[2].legend(fontsize=7, loc="lower left")
    fig.suptitle(
        "$p$ trained alone, $W = I$, $T$ = 32, $n$ = 100, lr = 5e-3, 1000 steps, balanced flips", fontsize=11
    )
    nb_text = "; ".join(
        f"eta {e:g}: ratio {v[0]:g}, train acc {v[1]:g}, test acc {v[2]:g}" for e, v in NOTEBOOK.items()
    )
    lines.append(f"the notebook's numbers: {nb_text}")
    return [save(fig, outdir / "fig14_collapse.png"), write_numbers(outdir, "fig14_collapse", lines)]
