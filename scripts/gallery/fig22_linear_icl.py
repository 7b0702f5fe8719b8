"""Figure 22: linear attention trained in context (Lu, Letey, Zavatone-Veth, Maiti and Pehlevan,
PNAS 2025), attnsim's fifth model, beside their theory and their simulation means. (a) The
memorization-to-ICL transition in task diversity kappa: the task generalization gap
g_task = e_ICL - e_IDG at alpha = tau = 10, rho = 0.01, lambda = 1e-6 (20 seeds at d = 10 and 32),
their published means (d10_gamma.csv, d32_gamma.csv) and the d -> infinity theory. (b) Double
descent in the pretraining ratio tau (their figure 1's setting: alpha = 1, kappa = 1): e_ICL of the
ridge endpoint at d = 32 for two ridges, with the theory's ridge curves. (c) The finite-d excess
of g_task over the theory at kappa = 0.2 against d = 16 ... 128, a fitted c / d^a with its error.
(d) Gradient flow from Gamma = 0 at d = 64 in closed form: e_ICL and e_IDG against time, to the
ridge endpoint."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnsim.models.linear_icl.theory import theory

from .common import arrays, records_of, save, sweep_mapping, write_numbers

QUICK_FIG = {
    "model": "linear_icl",
    "context_ratio": 10.0,
    "sample_ratio": 10.0,
    "noise_var": 0.01,
    "ridge": 1e-6,
}
KAPPAS = (0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.6, 2.0, 4.0, 8.0, 16.0, 32.0)
TAUS = (0.2, 0.4, 0.6, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)
RIDGES = (1e-4, 1e-2)
DS = {16: 40, 32: 20, 64: 8, 128: 4}  # d -> seeds
PUBLISHED = Path(__file__).resolve().parents[2] / "tests" / "data" / "lu2025"


def sweeps(quick: bool) -> list[dict]:
    kappas = KAPPAS[::3] if quick else KAPPAS
    seeds = 4 if quick else 20
    trans = [{"d": d, "task_ratio": k} for d in ((10,) if quick else (10, 32)) for k in kappas]
    d_dd = 12 if quick else 32
    dd = [{"d": d_dd, "task_ratio": 1.0, "context_ratio": 1.0, "sample_ratio": t, "ridge": r}
          for r in RIDGES for t in (TAUS[::2] if quick else TAUS)]  # fmt: skip
    ds = {16: 6, 32: 3} if quick else DS
    limit = [{"d": d, "task_ratio": 0.2, "seed_count": n} for d, n in ds.items()]
    flow = {"model": "linear_icl", "d": 16 if quick else 64, "integrator": "flow", "steps": 10**6,
            "lr": 1.0, "log_scale": "log", "log_points": 60, "task_ratio": 1.0, "ridge": 1e-6}  # fmt: skip
    return [
        sweep_mapping("fig22_transition", QUICK_FIG, {}, list(range(seeds)), points=trans),
        sweep_mapping(
            "fig22_double_descent",
            {**QUICK_FIG, "noise_var": 0.01},
            {},
            list(range(3 if quick else 10)),
            points=dd,
        ),  # fmt: skip
        *[
            sweep_mapping(
                f"fig22_limit_d{p['d']}",
                {**QUICK_FIG, "d": p["d"], "task_ratio": 0.2},
                {},
                list(range(p["seed_count"])),
            )  # fmt: skip
            for p in limit
        ],
        sweep_mapping("fig22_flow", flow, {}, [0], ["e_icl", "e_idg", "train_loss"]),
    ]


def _published(d: int) -> dict[float, tuple[float, float]]:
    with open(PUBLISHED / f"d{d}_gamma.csv", newline="") as fh:
        return {
            float(r["kappa"]): (float(r["gtask_mean"]), float(r["gtask_std"])) for r in csv.DictReader(fh)
        }


def _g_theory(alpha: float, kappa: float, tau: float, rho: float) -> float:
    p = theory(alpha, kappa, tau, rho, 0.0)
    return p.e_icl - p.e_idg


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    maps = sweeps(quick)
    trans, dd, *rest = (records_of(cache, m) for m in maps)
    limit, flow = rest[:-1], rest[-1]
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.8), layout="constrained")
    lines = ["Lu et al. (2025), linear attention in context: attnsim's ridge endpoints and exact errors "
             "beside their theory (d -> infinity) and their simulation means"]  # fmt: skip
    # (a) the transition in kappa
    ax = axes[0]
    ks = np.geomspace(0.15, 40, 200)
    ax.plot(ks, [_g_theory(10, k, 10, 0.01) for k in ks], "k-", lw=1, label="theory (d -> inf, ridgeless)")
    for i, d in enumerate(sorted({r["config"]["d"] for r in trans})):
        rows = sorted({r["config"]["task_ratio"] for r in trans if r["config"]["d"] == d})
        vals = [np.array([r["final"]["g_task"] for r in trans if r["config"]["d"] == d
                          and r["config"]["task_ratio"] == k]) for k in rows]  # fmt: skip
        mean, sd = np.array([v.mean() for v in vals]), np.array([v.std() for v in vals])
        ax.errorbar(
            rows,
            mean,
            sd,
            fmt="o",
            color=f"C{i}",
            ms=4,
            capsize=2,
            label=f"attnsim, d = {d} ({vals[0].size} seeds)",
        )
        pub = _published(d) if (PUBLISHED / f"d{d}_gamma.csv").exists() else {}
        got = [(k, *pub[k]) for k in rows if k in pub]
        if got:
            kk, m, s = map(np.array, zip(*got))
            ax.errorbar(kk * 1.06, m, s, fmt="s", mfc="none", color=f"C{i}", ms=5, capsize=2,
                        label=f"Lu et al.'s means, d = {d} (20 draws)")  # fmt: skip
            n_ours = vals[0].size
            z = [
                (mean[rows.index(k)] - pm)
                / math.hypot(sd[rows.index(k)] / math.sqrt(n_ours), ps / math.sqrt(20))
                for k, pm, ps in got
            ]
            lines.append(
                f"(a) d = {d}: g_task against kappa, attnsim ({n_ours} seeds) against their means "
                f"(20 draws): z from {min(z):+.2f} to {max(z):+.2f} over {len(z)} kappas (both se)"
            )
        lines.append(
            f"    d = {d}: "
            + "; ".join(f"kappa {k:g}: {m:.4f} +- {s:.4f}" for k, m, s in zip(rows, mean, sd))
        )
    ax.set_xscale("log")
    ax.set_xlabel(r"task diversity $\kappa = k / d$")
    ax.set_ylabel(r"$g_{\rm task} = e_{\rm ICL} - e_{\rm IDG}$")
    ax.set_title(r"(a) memorization to ICL ($\alpha = \tau = 10$)", fontsize=10)
    ax.legend(fontsize=7)
    # (b) double descent in tau
    ax = axes[1]
    ts = np.linspace(0.15, 10, 300)
    for i, lam in enumerate(RIDGES):
        ax.plot(ts, [theory(1.0, 1.0, t, 0.01, lam).e_icl for t in ts], "-", color=f"C{i}", lw=1,
                label=rf"theory, $\lambda$ = {lam:g}")  # fmt: skip
        recs = [r for r in dd if r["config"]["ridge"] == lam]
        taus = sorted({r["config"]["sample_ratio"] for r in recs})
        vals = [
            np.array([r["final"]["e_icl"] for r in recs if r["config"]["sample_ratio"] == t]) for t in taus
        ]
        d_run = recs[0]["config"]["d"]
        ax.errorbar(taus, [v.mean() for v in vals], [v.std() for v in vals], fmt="o", ms=4, capsize=2,
                    color=f"C{i}", label=rf"attnsim, d = {d_run}, $\lambda$ = {lam:g}")  # fmt: skip
        peak = taus[int(np.argmax([v.mean() for v in vals]))]
        lines.append(
            f"(b) lambda = {lam:g}: e_ICL against tau at alpha = kappa = 1, d = {recs[0]['config']['d']}: "
            f"peak at tau = {peak:g}; " + "; ".join(f"{t:g}: {v.mean():.3f}" for t, v in zip(taus, vals))
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"pretraining sequences $\tau = n / d^2$")
    ax.set_ylabel(r"$e_{\rm ICL}$")
    ax.set_title(r"(b) double descent in $\tau$ ($\alpha = \kappa = 1$)", fontsize=10)
    ax.legend(fontsize=7)
    # (c) the finite-d excess
    ax = axes[2]
    g_inf = _g_theory(10, 0.2, 10, 0.01)
    ds, ex, se = [], [], []
    for recs in limit:
        g = np.array([r["final"]["g_task"] for r in recs])
        ds.append(recs[0]["config"]["d"])
        ex.append(g.mean() - g_inf)
        se.append(g.std(ddof=1) / math.sqrt(g.size))
    ds, ex, se = map(np.array, (ds, ex, se))
    X = np.vstack([np.ones_like(ds, dtype=float), np.log(ds)]).T
    Wt = 1.0 / (se / ex) ** 2
    cov = np.linalg.inv(X.T @ (Wt[:, None] * X))
    b = cov @ X.T @ (Wt * np.log(ex))
    a, a_err = -b[1], math.sqrt(cov[1, 1])
    c = math.exp(b[0])
    ax.errorbar(
        ds, ex, 2 * se, fmt="o", color="C0", capsize=2, label="attnsim: mean g_task - theory (+-2 se)"
    )
    dd_ = np.geomspace(ds.min() / 1.3, ds.max() * 1.3, 50)
    ax.plot(dd_, c * dd_**-a, "C0--", lw=1, label=rf"fit {c:.2f} $d^{{-{a:.2f} \pm {a_err:.2f}}}$")
    ax.plot(dd_, 6 / dd_, "k:", lw=1, label="6 / d (their files' excess, README)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(ds, [str(d) for d in ds])
    ax.minorticks_off()
    ax.set_xlabel("d")
    ax.set_ylabel(r"$g_{\rm task} - g_{\rm task}^{\infty}$")
    ax.set_title(rf"(c) finite d at $\kappa$ = 0.2: theory {g_inf:.4f}", fontsize=10)
    ax.legend(fontsize=7)
    shown = "; ".join(
        f"d = {d}: {e:.4f} +- {s:.4f} ({len(r)} seeds)" for d, e, s, r in zip(ds, ex, se, limit)
    )
    lines.append(f"(c) kappa = 0.2, alpha = tau = 10: theory g_task {g_inf:.5f}; attnsim's mean minus it: "
                 f"{shown}; fit excess = {c:.3f} d^-({a:.3f} +- {a_err:.3f})")  # fmt: skip
    # (d) the flow at d = 64
    ax = axes[3]
    r = flow[0]
    tr = arrays(r["trajectory"])
    t = tr["step"][1:] * r["config"]["lr"]
    ax.plot(t, tr["e_icl"][1:], "C0", label=r"$e_{\rm ICL}$")
    ax.plot(t, tr["e_idg"][1:], "C1", label=r"$e_{\rm IDG}$")
    ax.plot(t, tr["train_loss"][1:], "C2", label="training loss")
    th = theory(10, 1.0, 10, 0.01, 0.0)
    ax.axhline(th.e_icl, color="C0", ls=":", lw=0.8, label="theory endpoints")
    ax.axhline(th.e_idg, color="C1", ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"flow time $t$")
    ax.set_title(f"(d) gradient flow from 0, d = {r['config']['d']}, closed form", fontsize=10)
    ax.legend(fontsize=7)
    lines.append(
        f"(d) flow at d = {r['config']['d']} (kappa = 1): at t = {t[-1]:.3g} e_ICL {tr['e_icl'][-1]:.5f}, "
        f"e_IDG {tr['e_idg'][-1]:.5f} (theory {th.e_icl:.5f}, {th.e_idg:.5f})"
    )
    stem = "fig22_linear_icl"
    return [save(fig, outdir / f"{stem}.png"), write_numbers(outdir, stem, lines)]
