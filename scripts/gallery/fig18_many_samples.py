"""Figure 18: the many-sample limit (SPEC §17). (a), (b) Finite training sets of n = 20 ... 2000
samples against gradient flow on the population risk (n -> infinity): the error and the fresh
relevant score; (c) online SGD at d = 10^3 ... 10^5 with lr = c / d against the d -> infinity ODE
(the population flow with online SGD's variance term), (d) the deviation's rate in d fitted with
its uncertainty; (e) the exit time from uniform attention (the fresh relevant score reaches 0.3)
against d, the ODE's O(d) law beside the fit."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnsim.plotting import log_steps

from .common import arrays, records_of, save, sweep_mapping, write_numbers

# the finite-n runs (no number of the figure is their clean-label twin's)
FINITE = {
    "train": "p",
    "init_W": "identity",
    "d": 500,
    "signal_norm": 3.0,
    "lr": 0.01,
    "steps": 3000,
    "clean_twin": False,
}
FINITE_LOG = {"log_scale": "log", "log_points": 40, "pop_log_points": 40}
NS = (20, 50, 200, 500, 2000)
C, TAU, BATCH = 10.0, 3.0, 8  # lr = C / d, steps = TAU d, batch of the online runs
ONLINE = {"train": "p", "init_W": "identity", "signal_norm": 3.0, "batch": BATCH}
DS = (1000, 3000, 10_000, 30_000, 100_000)
D_ODE = 10**9  # the ODE: the population flow at this d (its variance rate c (1 - 4/d) / B)
LOGS = 60
EXIT = 0.3  # the fresh relevant score that ends the plateau at uniform attention (1/T = 0.125)
SEEDS = 32  # online runs per d: the exponents' errors come from resampling them
GROUP = 4  # seeds per disjoint group, whose exponents show the scatter a few seeds give
BOOT = 2000  # bootstrap resamples of the seeds


def exit_step(tr: dict) -> float:
    """The first step at which the fresh relevant score reaches EXIT, linearly interpolated
    between the log points around it (NaN when it never does)."""
    s, st = np.asarray(tr["pop_score_relevant"], float), np.asarray(tr["step"], float)
    ok = np.isfinite(s)
    s, st = s[ok], st[ok]
    up = np.flatnonzero(s >= EXIT)
    if up.size == 0 or up[0] == 0:
        return float("nan") if up.size == 0 else float(st[0])
    i = up[0]
    return float(st[i - 1] + (EXIT - s[i - 1]) / (s[i] - s[i - 1]) * (st[i] - st[i - 1]))


def _online(d: int, tau: float) -> dict:
    """An online run's point at d (lr = C / d, steps = tau d)."""
    steps = int(tau * d)
    return {"d": d, "lr": C / d, "steps": steps, "log_every": steps // LOGS, "pop_log_points": LOGS + 2}


def _sizes(quick: bool) -> tuple[tuple, tuple, range, float]:
    """(finite n, online d, seeds, tau) of the figure."""
    tau = 1.2 if quick else TAU  # the exit (score 0.3) comes at 1.07 d steps
    return ((20, 200), DS[:2], range(2), tau) if quick else (NS, DS, range(SEEDS), tau)


def sweeps(quick: bool) -> list[dict]:
    """(a) finite n and the population flow; (b) online SGD at each d, every seed; the ODE."""
    ns, ds, seeds, tau = _sizes(quick)
    finite = {**FINITE, **FINITE_LOG, **({"steps": 500} if quick else {})}
    points = [{"n": n} for n in ns] + [{"integrator": "population_flow"}]
    online = {**ONLINE, "integrator": "online"}
    saved = ["pop_error", "pop_score_relevant", "p_norm"]
    return [
        sweep_mapping("fig18_finite", finite, {}, [0], saved, points=points),
        sweep_mapping("fig18_online", online, {}, list(seeds), saved, points=[_online(d, tau) for d in ds]),
        sweep_mapping(
            "fig18_ode", {**online, "integrator": "population_flow"}, {}, [0], saved, [_online(D_ODE, tau)]
        ),
    ]


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Slope, its standard error and intercept of log y against log x."""
    X, Y = np.log(x), np.log(y)
    A = np.column_stack([X, np.ones_like(X)])
    coef, res, *_ = np.linalg.lstsq(A, Y, rcond=None)
    dof = max(len(X) - 2, 1)
    s2 = float(np.sum((Y - A @ coef) ** 2)) / dof
    return float(coef[0]), float(np.sqrt(s2 / np.sum((X - X.mean()) ** 2))), float(coef[1])


def seed_errors(dev: list[np.ndarray], ex: np.ndarray, ds, seed: int = 0) -> dict:
    """The exponents' uncertainty from the seeds themselves: ``dev`` (per d, (seeds, log points)
    deviations of |q| from the ODE) and ``ex`` ((d, seeds) exit steps). The seeds are resampled
    with replacement (the same resample at every d: a seed's runs share nothing across d, so
    this is a plain bootstrap of independent runs) and both fits redone: the sd of the
    resampled slopes is each exponent's error. Also the slopes of disjoint groups of GROUP
    seeds: what a figure made from that many would have shown."""
    rng = np.random.default_rng(seed)
    S = ex.shape[1]
    x = np.array(ds, float)

    def slopes(idx):
        rms = [float(np.sqrt(np.mean(v[idx, 1:] ** 2))) for v in dev]
        return _fit(x, np.array(rms))[0], _fit(x, np.nanmean(ex[:, idx], axis=1))[0]

    boot = np.array([slopes(rng.integers(0, S, S)) for _ in range(BOOT)])
    groups = np.array([slopes(np.arange(g, g + GROUP)) for g in range(0, S - GROUP + 1, GROUP)])
    return {"boot_sd": boot.std(axis=0, ddof=1), "groups": groups}


def make(outdir: Path, quick: bool = False, cache: Path = Path("sweeps/figures")) -> list[Path]:
    ns, ds, seeds, _ = _sizes(quick)
    finite, online, ode = (records_of(cache, m) for m in sweeps(quick))
    by_n = {r["config"]["n"]: arrays(r["trajectory"]) for r in finite if r["config"]["integrator"] == "gd"}
    flow = next(arrays(r["trajectory"]) for r in finite if r["config"]["integrator"] == "population_flow")
    fig, grid = plt.subplots(2, 3, figsize=(13.5, 8), layout="constrained")
    # (a) error, (b) score, (c) |q| against time, (d) deviation from the ODE, (e) exit time
    axes = [grid[0, 0], grid[0, 1], grid[0, 2], grid[1, 0], grid[1, 1]]
    grid[1, 2].axis("off")
    lines = []
    # (a) finite n against the population flow
    for i, n in enumerate(ns):
        tr = by_n[n]
        err, score = np.asarray(tr["pop_error"], float), np.asarray(tr["pop_score_relevant"], float)
        st, ok = log_steps(tr["step"]), np.isfinite(err)
        axes[0].plot(st[ok], err[ok], color=f"C{i}", label=f"n = {n}")
        axes[1].plot(st[ok], score[ok], color=f"C{i}")
        lines.append(
            f"(a) n = {n}: final population error {err[ok][-1]:.4f}, fresh relevant score {score[ok][-1]:.4f}"
        )
    fe, fs = np.asarray(flow["pop_error"], float), np.asarray(flow["pop_score_relevant"], float)
    ok = np.isfinite(fe)
    for ax, v in ((axes[0], fe), (axes[1], fs)):
        ax.plot(log_steps(flow["step"])[ok], v[ok], "k--", lw=1.6, label="population flow (n = inf)")
    lines.append(
        f"(a) population flow: final population error {fe[ok][-1]:.4f}, fresh relevant score {fs[ok][-1]:.4f}"
    )
    # (b) online SGD against the ODE, (c) the exit time
    ode_tr = arrays(ode[0]["trajectory"])
    t_ode = np.asarray(ode_tr["step"]) / D_ODE  # time in units of d steps
    ode_norm = np.asarray(ode_tr["p_norm"])
    runs = {(r["config"]["d"], r["config"]["seed"]): arrays(r["trajectory"]) for r in online}
    rms, exits, devs = [], [], []
    for j, d in enumerate(ds):
        dev, ex = [], []
        for seed in seeds:
            tr = runs[(d, seed)]
            t = np.asarray(tr["step"]) / d
            x = np.asarray(tr["p_norm"])
            dev.append(x - np.interp(t, t_ode, ode_norm))
            ex.append(exit_step(tr))
            if seed == 0:
                axes[2].plot(t, x, color=f"C{j}", lw=0.9, label=f"online, d = {d:g}")
        dev = np.array(dev)
        devs.append(dev)
        rms.append(float(np.sqrt(np.mean(dev[:, 1:] ** 2))))
        exits.append(ex)
        sd = float(np.nanstd(ex, ddof=1)) if len(ex) > 1 else float("nan")
        lines.append(
            f"(d) d = {d}: rms deviation of |q| from the ODE {rms[-1]:.3g} over {len(seeds)} seeds and "
            f"{LOGS} log points; (e) exit step {np.nanmean(ex):.5g} +- {sd / np.sqrt(len(ex)):.2g} "
            f"(sd {sd:.3g})"
        )
    axes[2].plot(t_ode, ode_norm, "k--", lw=1.6, label="ODE (d -> inf)")
    slope, _, icpt = _fit(np.array(ds, float), np.array(rms))
    ex = np.array(exits, float)
    err = seed_errors(devs, ex, ds)
    se, ese = err["boot_sd"]
    axes[3].loglog(ds, rms, "o", color="C3", label=f"rms $|q|$ - ODE: slope {slope:.2f} ± {se:.2f}")
    dd = np.array([ds[0], ds[-1]], float)
    axes[3].loglog(dd, np.exp(icpt) * dd**slope, "-", color="C3", lw=0.8)
    axes[3].loglog(dd, rms[0] * (dd / dd[0]) ** -0.5, ":", color="C3", lw=1.0, label=r"$1/\sqrt{d}$")
    mean_ex = np.nanmean(ex, axis=1)
    eslope, _, eicpt = _fit(np.array(ds, float), mean_ex)
    t_star = exit_step(ode_tr)
    ax2 = axes[4]
    ax2.loglog(np.repeat(ds, ex.shape[1]), ex.ravel(), "s", color="C0", ms=3, alpha=0.6, label="each seed")
    ax2.loglog(
        dd,
        np.exp(eicpt) * dd**eslope,
        "-",
        color="C0",
        lw=0.8,
        label=f"exit steps: fit slope {eslope:.3f} ± {ese:.3f}",
    )
    if np.isfinite(t_star):
        ax2.loglog(dd, t_star / D_ODE * dd, "--", color="C0", lw=1.0, label="ODE: O(d), (t*/d) d")
    ax2.set_ylabel(f"exit step (fresh relevant score reaches {EXIT})")
    ax2.set_xlabel("d")
    ax2.legend(fontsize=7, loc="upper left")
    n_seeds, g = len(seeds), err["groups"]
    spread = (
        f"; {len(g)} disjoint groups of {GROUP} seeds give {g[:, 0].min():.3f} to {g[:, 0].max():.3f} "
        f"(sd {g[:, 0].std(ddof=1):.3f})"
        if len(g) > 1
        else ""
    )
    lines.append(
        f"(d) deviation rate over {n_seeds} seeds: rms ~ d^{slope:.3f} +- {se:.3f} (bootstrap over seeds; "
        f"1/sqrt(d): -0.5){spread}"
    )
    lines.append(
        f"(e) exit step (score {EXIT}) over {n_seeds} seeds ~ d^{eslope:.4f} +- {ese:.4f} (bootstrap over "
        f"seeds); the ODE's exit {t_star / D_ODE:.4f} d steps (information exponent 1: O(d)); measured mean "
        "exit / d " + ", ".join(f"{m / d:.4f}" for m, d in zip(mean_ex, ds))
    )
    titles = (
        "(a) population error: finite n and the population flow",
        "(b) fresh-sample relevant score",
        f"(c) online SGD: |q| against steps / d (lr {C:g}/d, batch {BATCH})",
        f"(d) rms deviation of |q| from the ODE ({len(seeds)} seeds)",
        f"(e) exit time against d ({len(seeds)} seeds; errors: bootstrap)",
    )
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=9)
    for ax in axes[:2]:
        ax.set_xscale("log")
        ax.set_xlabel("step")
    axes[2].set_xlabel("step / d")
    axes[3].set_xlabel("d")
    axes[3].set_ylabel("rms deviation of |q| from the ODE")
    axes[0].legend(fontsize=7)
    axes[2].legend(fontsize=7)
    axes[3].legend(fontsize=7, loc="lower left")
    return [save(fig, outdir / "fig18_many_samples.png"), write_numbers(outdir, "fig18_many_samples", lines)]
