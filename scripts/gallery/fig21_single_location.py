"""Figure 21: single-location regression (Marion, Berthier, Biau and Boyer, ICLR 2025), attnsim's
fourth model. (a) Their published PGD configurations (their config.py: d = 400, L = 10,
gamma = sqrt 0.5; 30 seeds each) on the closed-form population risk, exact in five overlaps: the
overlaps |k.k*|, |v.v*| and the risk against steps, median and the 10-90 % band over seeds.
(b) Which end each seed reaches: the teacher, the spurious stationary point k = +-v* (with
v.k* = +-0.63 at lambda = 0.1 from the sphere), or elsewhere. (c) Duranthon et al.'s
question on the same data: the population risk after online SGD (d = 80, L = 10, batch 64) for
erf, softmax and linear attention against lambda (5 seeds; erf's risk is the closed form, the
others' a Monte Carlo estimate with its standard error)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from .common import arrays, records_of, save, sweep_mapping, write_numbers

PUBLISHED = {  # their config.py's PGD runs (name: keys)
    "manifold, lambda 0.1": {"init": "manifold", "attention_scale": 0.1, "lr": 4e-3, "steps": 20_000},
    "sphere, lambda 0.9": {"init": "sphere", "attention_scale": 0.9, "lr": 1e-3, "steps": 120_000},
    "sphere, lambda 0.1": {"init": "sphere", "attention_scale": 0.1, "lr": 4e-3, "steps": 20_000},
    "sphere, lambda 1 / (1 + 1e-4 t)": {
        "init": "sphere", "attention_scale": 1.0, "lr": 4e-3, "steps": 120_000, "scale_schedule": True,
    },
}  # fmt: skip
BASE = {"model": "single_location", "log_scale": "log", "log_points": 60, "pop_log_points": 60}
SAVE = ["k_kstar", "v_vstar", "risk", "manifold_distance"]
ATTENTION = {
    "model": "single_location", "integrator": "online", "d": 80, "T": 10, "batch": 64, "lr": 0.01,
    "steps": 5000, "init": "sphere", "label_sd": 0.1, "pop_points": 1 << 15, "log_every": 5000,
}  # fmt: skip
SCALES = (0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0)
OUTCOMES = {  # where a run ends, by its final overlaps (the figure's panel b)
    "the teacher (|v.v*| > 0.99, |k.k*| > 0.9)": "C2",
    "k at +-v* (|v*.k| > 0.9)": "C3",
    "elsewhere": "0.6",
}


def outcome(f: dict) -> str:
    """The end of a run: the teacher, the spurious point k = +-v*, or elsewhere (the sign of
    (k, v) does not matter: the predictor is the same at -k, -v)."""
    names = list(OUTCOMES)
    if abs(f["v_vstar"]) > 0.99 and abs(f["k_kstar"]) > 0.9:
        return names[0]
    return names[1] if abs(f["vstar_k"]) > 0.9 else names[2]


def sweeps(quick: bool) -> list[dict]:
    seeds = list(range(4 if quick else 30))
    points = [{**keys, "steps": keys["steps"] // (10 if quick else 1)} for keys in PUBLISHED.values()]
    att = {
        "attention": ["erf", "softmax", "linear"],
        "attention_scale": list(SCALES[1:4] if quick else SCALES),
    }
    base_att = {**ATTENTION, "steps": 400 if quick else ATTENTION["steps"]}
    base_att["log_every"] = base_att["steps"]
    return [
        sweep_mapping("fig21_published", BASE, {}, seeds, SAVE, points=points),
        sweep_mapping("fig21_attention", base_att, att, list(range(2 if quick else 3))),
    ]


def _name(cfg: dict) -> str:
    for name, keys in PUBLISHED.items():
        if all(cfg[k] == v for k, v in keys.items() if k != "steps"):
            return name
    raise KeyError(cfg)


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    pub_recs, att_recs = (records_of(cache, m) for m in sweeps(quick))
    runs: dict[str, list] = {}
    for r in pub_recs:
        runs.setdefault(_name(r["config"]), []).append(r)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), layout="constrained")
    lines = [
        "Marion et al. (2025), single-location regression: their published PGD configurations (d = 400, "
        f"L = 10, gamma = sqrt 0.5), {len(next(iter(runs.values())))} seeds each, attnsim's exact PGD in "
        "the five overlaps"
    ]
    ax = axes[0]
    name = "manifold, lambda 0.1"
    trs = [arrays(r["trajectory"]) for r in runs[name]]
    step = trs[0]["step"]
    for metric, color, label in (("k_kstar", "C0", "|k . k*|"), ("v_vstar", "C1", "|v . v*|"),
                                 ("risk", "C2", "risk")):  # fmt: skip
        v = np.abs(np.array([t[metric] for t in trs]))
        lo, med, hi = np.nanpercentile(v, [10, 50, 90], axis=0)
        ax.plot(step[1:], med[1:], color=color, label=label)
        ax.fill_between(step[1:], lo[1:], hi[1:], color=color, alpha=0.2, lw=0)
    ax.set_xscale("log")
    ax.set_xlabel("PGD steps")
    ax.set_title(f"(a) {name} from the manifold: median and 10-90 % over seeds", fontsize=10)
    ax.legend(fontsize=8, loc="center left")
    ax = axes[1]
    for i, (name, recs) in enumerate(runs.items()):
        fin = [r["final"] for r in recs]
        kinds = [outcome(f) for f in fin]
        bottom = 0.0
        for kind, color in OUTCOMES.items():
            share = kinds.count(kind) / len(kinds)
            ax.bar(i, share, bottom=bottom, color=color, label=kind if i == 0 else None)
            if share:
                ax.text(i, bottom + share / 2, f"{kinds.count(kind)}", ha="center", va="center", fontsize=8)
            bottom += share
        risk = np.array([f["risk"] for f in fin])
        counts = ", ".join(f"{kinds.count(k)} {k}" for k in OUTCOMES if kinds.count(k))
        lines.append(
            f"{name}: {counts}; |k.k*| median {np.median([abs(f['k_kstar']) for f in fin]):.4f}, |v.v*| "
            f"median {np.median([abs(f['v_vstar']) for f in fin]):.4f}; risk median {np.median(risk):.4f} "
            f"(min {risk.min():.4f}, max {risk.max():.4f})"
        )
    ax.set_xticks(range(len(runs)), [n.replace(", ", "\n", 1) for n in runs], fontsize=8)
    ax.set_ylim(0, 1.0)
    ax.set_ylabel("fraction of the seeds")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.14), ncol=3, frameon=False)
    ax.set_title("(b) where projected GD ends, per published configuration", fontsize=10)
    ax = axes[2]
    lines.append(
        "Duranthon et al.'s question on the same data (online SGD, d = 80, L = 10, batch 64, lr 0.01, "
        f"{att_recs[0]['config']['steps']} steps, label sd 0.1, from the sphere): population risk, "
        "mean +- sd over seeds"
    )
    for i, att in enumerate(("erf", "softmax", "linear")):
        rows = sorted({r["config"]["attention_scale"] for r in att_recs})
        mean, sd, se = [], [], []
        for lam in rows:
            fin = [
                r["final"]
                for r in att_recs
                if r["config"]["attention"] == att and r["config"]["attention_scale"] == lam
            ]
            risk = np.array([f["risk"] for f in fin])
            mean.append(risk.mean())
            sd.append(risk.std(ddof=1) if risk.size > 1 else 0.0)
            se.append(np.mean([f["risk_se"] for f in fin]))
        ax.errorbar(rows, mean, sd, fmt="o-", color=f"C{i}", capsize=2, ms=4, label=f"{att} attention")
        lines.append(
            f"  {att}: "
            + "; ".join(
                f"lambda {lam:g}: {m:.4f} +- {s:.4f} (estimator se {e:.1g})"
                for lam, m, s, e in zip(rows, mean, sd, se)
            )  # fmt: skip
        )
    floor = att_recs[0]["config"]["label_sd"] ** 2
    ax.axhline(floor, color="k", ls=":", lw=0.8, label=r"$\varepsilon^2$ (the label noise)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(r"attention scale $\lambda$")
    ax.set_ylabel("population risk after training")
    ax.set_title("(c) erf, softmax and linear attention on the same data", fontsize=10)
    ax.legend(fontsize=8)
    return [
        save(fig, outdir / "fig21_single_location.png"),
        write_numbers(outdir, "fig21_single_location", lines),
    ]
