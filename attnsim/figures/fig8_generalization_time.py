"""Figure 8: when generalization arrives. Memorization and generalization
times (the fresh relevant score reaching 1/2 for good) against the signal
strength at d = 1000, 2000, 4000, by gradient flow to 10^14 steps, 3 seeds,
with the critical |mu| predicted by the max-margin limit (where the
hard-attention relevant probability crosses 1/2: below it generalization never
comes, however long training runs)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from .common import save, sweep_records, write_numbers

DIMS = (1000, 2000, 4000)
SNRS = [round(v, 3) for v in np.linspace(0.1, 0.34, 13)]  # |mu| = SNR sqrt(d)
HORIZON = 10**14
SAVE = ["pop_error", "pop_score_relevant", "mm_cos", "train_loss"]


def records(quick: bool, cache: Path) -> dict[int, list[dict]]:
    dims = (1000, 2000) if quick else DIMS
    snrs = SNRS[::3] if quick else SNRS
    seeds = [0] if quick else [0, 1, 2]
    base = {"integrator": "flow", "steps": 10**9 if quick else HORIZON, "log_scale": "log", "log_points": 60,
            "pop_log_points": 60, "limit": True, "engine": "reduced"}  # fmt: skip
    return {
        d: sweep_records(
            cache,
            f"fig8_gen_time_{d}",
            {**base, "d": d},
            {"signal_norm": [round(s * math.sqrt(d), 3) for s in snrs]},
            seeds,
            SAVE,
        )  # fmt: skip
        for d in dims
    }


def critical_norm(recs: list[dict]) -> float | None:
    """The |mu| where the seed-mean hard-limit relevant probability crosses 1/2 (linear interpolation)."""
    mus = sorted({r["config"]["signal_norm"] for r in recs})
    prob = [
        np.mean([r["limit"]["relevant_prob"] for r in recs if r["config"]["signal_norm"] == m]) for m in mus
    ]
    for (m0, p0), (m1, p1) in zip(zip(mus, prob), zip(mus[1:], prob[1:])):
        if p0 < 0.5 <= p1:
            return m0 + (0.5 - p0) * (m1 - m0) / (p1 - p0)
    return None


def law(recs: list[dict]) -> dict | None:
    """Fit t_generalize = A (p - 1/2)^(-gamma) over the runs that generalize, p
    each run's hard-attention relevant probability: the time diverges as the
    limit's probability of selecting the relevant token comes down to 1/2."""
    pts = [(r["limit"]["relevant_prob"] - 0.5, r["theory"]["t_generalize"]) for r in recs
           if r["theory"]["t_generalize"] is not None and r["limit"]["relevant_prob"] > 0.5]  # fmt: skip
    if len(pts) < 3:
        return None
    x = np.log10([g for g, _ in pts])
    y = np.log10([t for _, t in pts])
    slope, a = np.polyfit(x, y, 1)
    rms = float(np.sqrt(np.mean((a + slope * x - y) ** 2)))
    return {"log10_A": float(a), "gamma": float(-slope), "rms": rms, "points": len(pts)}


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    data = records(quick, cache)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    lines = []
    for i, (d, recs) in enumerate(data.items()):
        color = f"C{i}"
        mu_c = critical_norm(recs)
        mus = np.array(sorted({r["config"]["signal_norm"] for r in recs}))
        for key, marker, ls in (("t_generalize", "o", "-"), ("t_memorize", "s", ":")):
            per = [[r["theory"][key] for r in recs if r["config"]["signal_norm"] == m] for m in mus]
            mean = [np.exp(np.mean(np.log([t for t in v if t is not None]))) if all(t is not None for t in v)
                    else np.nan for v in per]  # fmt: skip
            for m, v in zip(mus, per):
                ts = [t for t in v if t is not None]
                axes[0].plot([m] * len(ts), ts, marker, color=color, ms=3, alpha=0.5)
                axes[1].plot([d / m**2] * len(ts), ts, marker, color=color, ms=3, alpha=0.5)
            label = f"d={d}: {'generalized' if key == 't_generalize' else 'memorized'}"
            axes[0].plot(mus, mean, ls, color=color, label=label)
            axes[1].plot(d / mus**2, mean, ls, color=color)
        if mu_c is not None:
            axes[0].axvline(mu_c, color=color, ls="--", lw=0.8)
            never = sorted({r["config"]["signal_norm"] for r in recs if r["limit"].get("gen_never")})
            beyond = sorted({r["config"]["signal_norm"] for r in recs if r["theory"]["t_generalize"] is None})
            lines.append(
                f"d={d}: critical |mu| from the limit {mu_c:.2f} (SNR {mu_c / math.sqrt(d):.3f}); "
                f"gen_never at |mu| in {never}; no generalization within {recs[0]['config']['steps']:.0e} "
                f"steps at |mu| in {beyond}"
            )
        fit = law(recs)
        if fit is not None:
            lines.append(
                f"d={d}: t_generalize = 10^{fit['log10_A']:.2f} (p_limit - 1/2)^-{fit['gamma']:.2f} "
                f"(rms {fit['rms']:.2f} decades over {fit['points']} runs)"
            )
            lo = min(r["limit"]["relevant_prob"] for r in recs if r["limit"]["relevant_prob"] > 0.5) - 0.5
            g = np.logspace(np.log10(lo), np.log10(0.5), 50)
            axes[2].plot(g, 10 ** fit["log10_A"] * g ** -fit["gamma"], "--", color=color, lw=0.8)
        for r in recs:
            t, prob = r["theory"]["t_generalize"], r["limit"]["relevant_prob"]
            if t is not None and prob > 0.5:
                axes[2].plot(prob - 0.5, t, "o", color=color, ms=3)
    axes[0].set_xlabel("|mu| (dashed: critical |mu| of the max-margin limit)")
    axes[1].set_xlabel("1 / SNR^2 = d / |mu|^2")
    axes[2].set_xlabel("p_limit - 1/2 (hard-attention relevant probability of the run)")
    axes[2].set_xscale("log")
    for ax in axes:
        ax.set_yscale("log")
        ax.set_ylabel("step")
    axes[0].legend(fontsize=7)
    axes[0].set_title("memorization (squares) and generalization (dots), 3 seeds", fontsize=10)
    axes[1].set_title("against 1/SNR^2: faster than exponential", fontsize=10)
    axes[2].set_title("t_generalize diverges as the limit's relevant probability -> 1/2", fontsize=10)
    fig.tight_layout()
    return [
        save(fig, outdir / "fig8_generalization_time.png"),
        write_numbers(outdir, "fig8_generalization_time", lines),
    ]
