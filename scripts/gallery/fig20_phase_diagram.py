"""Figure 20: the phase diagram of positional and semantic attention (Cui, Behrens, Krzakala and
Zdeborová, NeurIPS 2024) at sigma = 0.5, lambda = 0.01, from attnsim's replica solver
(attnsim.models.positional_semantic.replica). (a) The (alpha, omega) plane: alpha_c(omega), where
the semantic and positional branches' free energies cross, from Gauss-Hermite rules (order 12,
the distance to order 8 as its error bar) and from the published notebook's rules; the published
transition line (their
02-toy_model_plots.ipynb, cell 5); and attnsim's gradient descent at finite d, both
initializations, each cell marked by the one that ends at the lower training objective. (b) The
d -> infinity check: GD from the semantic initialization at omega = 0.3, alpha = 2 at d = 250 to
2000 against the theory's gen error, the excess fitted as a power of d with its error."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnsim.models.positional_semantic import replica, replica_phases
from attnsim.models.positional_semantic.published_data import TRANSITION
from attnsim.results import atomic_write

from .common import records_of, save, sweep_mapping, write_numbers

PUBLISHED = TRANSITION  # the published transition line at sigma = 0.5 (alpha_c per omega)
SCALING = {"omega": 0.3, "alpha": 2.0}


def _plan(quick: bool) -> dict:
    if quick:
        return {
            "cells": {"d": 40, "alpha": [1.0, 1.8], "omega": [0.1, 0.4], "seeds": [0], "test_n": 500},
            "scaling": {40: [0, 1], 80: [0, 1]},
            "omegas": [0.3],
            "xtol": 2e-2,
            "gh_orders": (6, 8),
            "gh_alpha_c": (4, 6),
            "gh_bracket": (0.95, 1.1),
            "spin_step": 0.5,
        }
    return {
        "cells": {
            "d": 250,
            "alpha": [0.6, 1.0, 1.4, 1.8],
            "omega": [0.1, 0.2, 0.3, 0.4],
            "seeds": [0, 1],
            "test_n": 5000,
        },
        "scaling": {250: list(range(8)), 500: list(range(6)), 1000: list(range(3)), 2000: list(range(2))},
        "omegas": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5],
        "xtol": 2e-3,
        "gh_orders": (12, 16),
        "gh_alpha_c": (8, 12),
        "gh_bracket": (0.8, 1.15),
        "spin_step": 0.1,
    }


def sweeps(quick: bool) -> list[dict]:
    plan = _plan(quick)
    c = plan["cells"]
    base = {"model": "positional_semantic", "d": c["d"], "log_every": 500, "test_n": c["test_n"]}
    grid = {"alpha": c["alpha"], "omega": c["omega"], "init": ["semantic", "positional"]}
    out = [sweep_mapping("fig20_cells", base, grid, c["seeds"])]
    for d, seeds in plan["scaling"].items():
        base = {
            "model": "positional_semantic",
            "d": d,
            "log_every": 500,
            "test_n": 5000 if not quick else 500,
            "init": "semantic",
            **SCALING,
        }
        out.append(sweep_mapping(f"fig20_scaling_d{d}", base, {}, seeds))
    return out


def theory(quick: bool, cache: Path) -> dict:
    """alpha_c per omega (published rules, and Gauss-Hermite rules of two orders), the branches'
    state at the scaling point; cached as JSON beside the sweeps (about 90 s on one core, most of
    it the Gauss-Hermite line)."""
    path = Path(cache) / f"fig20_theory{'_quick' if quick else ''}.json"
    plan = _plan(quick)
    if path.is_file():
        out = json.loads(path.read_text())
        # a cache from before the line reached every omega of the plan, or from Gauss-Hermite rules
        stale = set(out["alpha_c"]) != {str(o) for o in plan["omegas"]}
        stale |= "spinodal" not in out or not _gh_complete(out.get("alpha_c_gh"), plan)
        if stale:
            out["alpha_c"] = published_line(out["alpha_c"], plan)
            out["alpha_c_gh"] = gh_line(out["alpha_c"], plan, out.get("alpha_c_gh"))
            out["spinodal"] = spinodals(out["alpha_c"], plan, out.get("spinodal"))
            atomic_write(path, lambda fh: fh.write(json.dumps(out).encode()))
        return out
    out: dict = {"alpha_c": published_line({}, plan)}
    out["alpha_c_gh"] = gh_line(out["alpha_c"], plan)
    s = replica.Settings(**SCALING)
    sol = replica.solve(s, "semantic", int_tol=0.5 if quick else 3e-2, orders=plan["gh_orders"])
    pub = replica.iterate(s, "semantic", rule="published")
    out["scaling_theory"] = {
        "gen_error": sol.mse / 2 if sol.converged else None,
        "theta": sol.theta / s.sigma**2 if sol.converged else None,
        "order": sol.order,
        "integration_error": sol.integration_error,
        "history": sol.history,
        "published_rule_gen_error": pub.mse / 2,
    }
    out["spinodal"] = spinodals(out["alpha_c"], plan)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda fh: fh.write(json.dumps(out).encode()))
    return out


def _gh_complete(line, plan: dict) -> bool:
    return isinstance(line, dict) and all(
        isinstance(line.get(str(order)), dict) and set(line[str(order)]) == {str(o) for o in plan["omegas"]}
        for order in plan["gh_alpha_c"]
    )


def published_line(done: dict, plan: dict) -> dict:
    """{omega: alpha_c} with the published rules for every omega of the plan not in ``done``,
    searched around the published line (beyond its last omega, between its last alpha_c and
    twice that)."""
    out = dict(done)
    om = sorted(PUBLISHED)
    for omega in plan["omegas"]:
        if str(omega) in out:
            continue
        guess = float(np.interp(omega, om, [PUBLISHED[o] for o in om]))
        lo, hi = (0.8 * guess, 1.25 * guess) if omega <= om[-1] else (guess, 2 * guess)
        out[str(omega)] = replica_phases.transition(omega, lo, hi, xtol=plan["xtol"], rule="published")
    return out


def gh_line(alpha_c: dict, plan: dict, done: dict | None = None) -> dict:
    """{order: {omega: alpha_c}} with Gauss-Hermite rules of each order in ``plan["gh_alpha_c"]``,
    searched around the published rules' alpha_c (within ``plan["gh_bracket"]`` times it; None
    where the branches do not cross there); what ``done`` (an older cache's line) has is kept."""
    out = {}
    for order in plan["gh_alpha_c"]:
        old = (done or {}).get(str(order))
        out[str(order)] = dict(old) if isinstance(old, dict) else {}
        for omega, a_pub in alpha_c.items():
            if omega in out[str(order)]:
                continue
            lo, hi = (f * a_pub for f in plan["gh_bracket"]) if a_pub else (0.3, 3.0)
            out[str(order)][omega] = replica_phases.transition(
                float(omega), lo, hi, xtol=plan["xtol"], order=order
            )
    return out


def spinodals(alpha_c: dict, plan: dict, done: dict | None = None) -> dict:
    """Per omega, where each branch stops existing (published rules), scanning away from alpha_c
    in steps of ``plan["spin_step"]``: the semantic branch downwards to 0.05, the positional
    upwards to 3; [last alive, first dead] (None: not reached within the scan). What ``done``
    (an older cache's) has is kept."""
    out = dict(done or {})
    step = plan["spin_step"]
    for omega, a_c in alpha_c.items():
        if a_c is None or omega in out:
            continue
        down = np.arange(a_c, 0.05 - 1e-9, -step)
        up = np.arange(a_c, 3.0 + 1e-9, step)
        out[omega] = {
            "semantic": replica_phases.spinodal(float(omega), "semantic", down, rule="published"),
            "positional": replica_phases.spinodal(float(omega), "positional", up, rule="published"),
        }
    return out


def cells(recs: list[dict]) -> dict:
    """(alpha, omega) -> (winning init, mean objective gap positional - semantic per d)."""
    by: dict = {}
    for r in recs:
        c = r["config"]
        by.setdefault((c["alpha"], c["omega"]), {}).setdefault(c["init"], []).append(
            r["final"]["train_objective"]
        )
    out = {}
    for key, inits in sorted(by.items()):
        gap = np.mean(inits["positional"]) - np.mean(inits["semantic"])
        out[key] = ("semantic" if gap > 0 else "positional", gap)
    return out


def fit(ds, excess, se) -> tuple[float, float, float]:
    """log excess = c - gamma log d by weighted least squares (weights from se / excess):
    (gamma, its standard error, c)."""
    x, y = np.log(ds), np.log(excess)
    w = (excess / np.maximum(se, 1e-300)) ** 2
    A = np.column_stack([np.ones_like(x), -x])
    cov = np.linalg.inv(A.T @ (A * w[:, None]))
    coef = cov @ (A.T @ (w * y))
    chi2 = float(w @ (y - A @ coef) ** 2)
    scale = max(1.0, chi2 / max(len(x) - 2, 1))  # a poor fit widens the error
    return float(coef[1]), float(math.sqrt(cov[1, 1] * scale)), float(coef[0])


def adjusted(recs: list[dict], metric: str = "gen_error") -> tuple:
    """Per d: the seeds' ``metric`` (gen error or theta) with the teacher's norm as a control
    variate. A seed's |Q*|^2/d (a chi-square over d, mean 1) moves its metric by slope
    (|Q*|^2/d - 1); the slope is fitted within each d and pooled, and each seed's value taken at
    |Q*|^2/d = 1. Returns (ds, means, standard errors, {d: adjusted values}, slope)."""
    by: dict = {}
    for r in recs:
        by.setdefault(r["config"]["d"], []).append((r["final"]["teacher_norm"], r["final"][metric]))
    num = den = 0.0
    for pairs in by.values():
        x, y = np.array(pairs).T
        num += float(((x - x.mean()) * (y - y.mean())).sum())
        den += float(((x - x.mean()) ** 2).sum())
    slope = num / den if den > 0 else 0.0
    ds = np.array(sorted(by))
    adj = {d: [y - slope * (x - 1.0) for x, y in by[d]] for d in ds}
    mean = np.array([np.mean(adj[d]) for d in ds])
    se = np.array(
        [np.std(adj[d], ddof=1) / math.sqrt(len(adj[d])) if len(adj[d]) > 1 else np.nan for d in ds]
    )
    return ds, mean, se, adj, slope


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    mappings = sweeps(quick)
    cell_recs = records_of(cache, mappings[0])
    scale_recs = records_of(cache, *mappings[1:])
    th = theory(quick, cache)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5), layout="constrained")

    om = sorted(PUBLISHED)
    ax.plot([PUBLISHED[o] for o in om], om, "--", color="0.4", lw=1.5, label="Cui et al.'s transition line")
    ac = {float(o): a for o, a in th["alpha_c"].items() if a is not None}
    ax.plot(
        list(ac.values()),
        list(ac.keys()),
        "o:",
        color="0.3",
        mfc="none",
        ms=5,
        label=r"attnsim $\alpha_c$, the published notebook's rules",
    )
    lo_order, hi_order = (str(o) for o in _plan(quick)["gh_alpha_c"])
    lower = th["alpha_c_gh"][lo_order]
    gh = [  # a point whose lower order did not converge is drawn without its bar (an open marker)
        (float(o), a, abs(a - lower[o]) if lower.get(o) is not None else np.nan)
        for o, a in th["alpha_c_gh"][hi_order].items()
        if a is not None
    ]
    if gh:
        omegas, alphas, spread = (np.array(v) for v in zip(*sorted(gh)))
        ax.errorbar(
            alphas,
            omegas,
            xerr=np.nan_to_num(spread),
            fmt="o-",
            color="k",
            ms=5,
            capsize=3,
            label=rf"attnsim $\alpha_c$, Gauss-Hermite {hi_order} ($\pm$ move from {lo_order})",
        )
        bare = np.isnan(spread)
        if bare.any():
            ax.plot(alphas[bare], omegas[bare], "o", mfc="w", mec="k", ms=7, zorder=5,
                    label=f"(open: order {lo_order} did not converge there; no bar)")  # fmt: skip
    for branch, marker in (("semantic", "<"), ("positional", ">")):
        pts = [(v[branch][0], float(o)) for o, v in th["spinodal"].items() if v[branch][1] is not None]
        if pts:
            ax.plot(
                *zip(*pts),
                marker,
                ls=":",
                color="C0" if branch == "semantic" else "C3",
                ms=6,
                label=f"{branch} branch's last alpha (spinodal, published rules)",
            )
    won = cells(cell_recs)
    d_cells = cell_recs[0]["config"]["d"]
    for init, color in (("semantic", "C0"), ("positional", "C3")):
        pts = [k for k, v in won.items() if v[0] == init]
        if pts:
            ax.scatter(
                [p[0] for p in pts],
                [p[1] for p in pts],
                s=90,
                color=color,
                alpha=0.5,
                label=f"GD, d = {d_cells}: {init} init ends lower",
            )
    ax.set_xlabel(r"$\alpha = n / d$")
    ax.set_ylabel(r"$\omega$ (the teacher's positional weight)")
    ax.set_title("(a) semantic right of the line, positional left")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(lw=0.3)

    ref = th["scaling_theory"]["gen_error"]
    ds, mean, se, by_d, slope = adjusted(scale_recs)
    excess = mean - ref
    bx.errorbar(
        ds,
        excess,
        2 * se,
        fmt="o",
        color="C0",
        capsize=3,
        label="GD mean at $\\|Q^*\\|^2/d = 1$ (control variate) - theory, $\\pm$ 2 se",
    )
    usable = (excess > 0) & np.isfinite(se)
    gamma = gamma_se = None
    if usable.sum() >= 2:
        gamma, gamma_se, c = fit(ds[usable], excess[usable], se[usable])
        xx = np.geomspace(ds.min(), ds.max(), 50)
        bx.plot(
            xx,
            np.exp(c) * xx**-gamma,
            "-",
            color="C0",
            lw=1,
            label=rf"fit $\propto d^{{-\gamma}}$, $\gamma$ = {gamma:.2f} $\pm$ {gamma_se:.2f}",
        )
    bx.set_xscale("log")
    bx.axhline(0.0, color="0.4", lw=0.8)  # a linear axis: the difference and its bars may reach below 0
    bx.set_xlabel("d")
    bx.set_ylabel("gen error - replica gen error")
    bx.set_title(rf"(b) semantic init, $\omega$ = 0.3, $\alpha$ = 2: theory gen error {ref:.5g}")
    bx.legend(fontsize=8)
    bx.grid(lw=0.3, which="both")
    fig.suptitle(
        r"positional and semantic attention, $\sigma$ = 0.5, $\lambda$ = 0.01: replica theory and GD "
        "(lr 0.15, 5000 steps)",
        fontsize=11,
    )

    lines = [
        f"alpha_c(omega), published rules: attnsim {ac.get(o)} | published {PUBLISHED.get(o)}"
        for o in sorted(ac)
    ]
    lines += [
        f"alpha_c({o}), Gauss-Hermite order {order}: {a}"
        for order, line in th["alpha_c_gh"].items()
        for o, a in line.items()
    ]
    for o, v in th["spinodal"].items():
        lines.append(
            f"omega {o}: semantic alive down to alpha {v['semantic'][0]} (gone at {v['semantic'][1]}); "
            f"positional alive up to {v['positional'][0]} (gone at {v['positional'][1]}; None: not within 3)"
        )
    for key, (init, gap) in won.items():
        lines.append(
            f"GD d = {d_cells}, alpha {key[0]:g}, omega {key[1]:g}: {init} init ends lower "
            f"(objective gap positional - semantic {gap:+.4g})"
        )
    st = th["scaling_theory"]
    lines.append(
        f"theory at omega 0.3, alpha 2, semantic: gen error {ref} (Gauss-Hermite order {st['order']}, "
        f"moved {st['integration_error']} relative from the order before; history {st['history']}); "
        f"the published rules give {st['published_rule_gen_error']}"
    )
    for d, m, s_, e in zip(ds, mean, se, excess):
        lines.append(
            f"d = {d}: {len(by_d[d])} seeds, gen error at |Q*|^2/d = 1 {m:.6g} +- {s_:.2g} (se), "
            f"excess {e:.4g}"
        )
    lines.append(
        f"control variate: gen error moves by {slope:.4g} per unit of |Q*|^2/d - 1 (pooled within d)"
    )
    lines.append(
        f"fit excess ~ d^-gamma: gamma = {gamma} +- {gamma_se}"
        if gamma is not None
        else "fit: fewer than two d with a positive excess and an se; no exponent"
    )
    ref_theta = th["scaling_theory"]["theta"]
    t_ds, t_mean, t_se, t_by, t_slope = adjusted(scale_recs, "theta")
    shortfall = ref_theta - t_mean
    lines.append(f"theta (|Q*^T Q|/d): theory {ref_theta}; control-variate slope {t_slope:.4g}")
    for d, m, s_, g in zip(t_ds, t_mean, t_se, shortfall):
        lines.append(
            f"d = {d}: {len(t_by[d])} seeds, theta at |Q*|^2/d = 1 {m:.5g} +- {s_:.2g} (se), "
            f"below the theory by {g:.4g}"
        )
    usable = (shortfall > 0) & np.isfinite(t_se)
    if usable.sum() >= 2:
        t_gamma, t_gamma_se, _ = fit(t_ds[usable], shortfall[usable], t_se[usable])
        lines.append(f"fit theta shortfall ~ d^-gamma: gamma = {t_gamma} +- {t_gamma_se}")
    else:
        lines.append("theta fit: fewer than two d with a positive shortfall and an se; no exponent")
    return [
        save(fig, outdir / "fig20_phase_diagram.png"),
        write_numbers(outdir, "fig20_phase_diagram", lines),
    ]
