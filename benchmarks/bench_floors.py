"""Every hot loop of the attention model against its own floor, in one run.

The floor of a loop is the work it cannot avoid, written as bare loops in
``floor_kernels.py`` (same numerics: float64, no fastmath) and timed in the
same process, alternating with the loop itself in blocks: the loop, its floor,
the loop, ... The loops, on the default problem (the reduced engine, k = r =
n T + 2 = 162):

- the reduced GD step in its W form (``Segment``) and its X W form
  (``SegmentXW``): ``--steps`` steps per block;
- the gradient flow's vector field (``FlowField``): one evaluation per call;
- one population evaluation (``Population.evaluate``, 4096 points: the bulk
  metrics and the error's tail estimator) of the default run's state at step
  1000, against two floors: the bulk's exponentials and sums with the tail
  points' (without the tail estimator's search for its design points and the
  weights of its mixture proposal), and that with both (SPEC §9: at most 1.5x
  that floor).

BLAS is pinned to one thread, as inside a run (``OPENBLAS_NUM_THREADS=1``
is set before NumPy loads). Prints each loop's time per call, median (min-max)
over ``--reps`` blocks, its floor's, and the ratio (the median of the
per-block ratios); ``--json`` writes the table for benchmarks/run_all.py.

Usage::

    python benchmarks/bench_floors.py [--steps 20000] [--reps 7] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ["OPENBLAS_NUM_THREADS"] = (
    "1"  # as in a run's step loop (pinned, whatever the caller set); before NumPy
)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import floor_kernels as FK  # noqa: E402


def _calls(fn):
    """fn called m times (results dropped: a list of them would hold every output)."""

    def run(m):
        for _ in range(m):
            fn()

    return run


def _pair(loop, floor, calls: int, reps: int) -> dict:
    """Alternate blocks of ``calls`` calls of loop and floor; per-call seconds."""
    loop(1), floor(1)  # load the kernels, fill the caches
    t_loop, t_floor = [], []
    for _ in range(reps):
        t = time.perf_counter()
        loop(calls)
        t_loop.append((time.perf_counter() - t) / calls)
        t = time.perf_counter()
        floor(calls)
        t_floor.append((time.perf_counter() - t) / calls)
    a, b = np.array(t_loop), np.array(t_floor)
    return {"us": 1e6 * float(np.median(a)), "us_min": 1e6 * float(a.min()), "us_max": 1e6 * float(a.max()),
            "floor_us": 1e6 * float(np.median(b)), "floor_min": 1e6 * float(b.min()),
            "floor_max": 1e6 * float(b.max()), "x_floor": float(np.median(a / b))}  # fmt: skip


def default_problem():
    """The default run's reduced problem: (cfg, pb, ds, the steppers' ModelArrays)."""
    from attnsim.config import Config
    from attnsim.data.dataset import make_streams
    from attnsim.models.attention import engines, steppers
    from attnsim.runtime.workspace import Workspace

    cfg = Config()
    pb, ds = engines.build(cfg, None, make_streams(cfg.seed), "reduced", "benchmark", Workspace())
    rel = ds.relevant_indicator(pb.T)
    prob = steppers.ModelArrays(pb.X2, pb.y, pb.W0, pb.p0, pb.nu0, pb.T, cfg.lr, cfg.train_set, cfg.loss, rel)
    return cfg, pb, ds, prob


def population_floor_args(cfg, ds) -> tuple:
    """(Population, its evaluate's arguments, FK.population_floor's arguments) at the default run's
    state after its steps."""
    import attnsim
    from attnsim.models.attention import population

    res = attnsim.simulate({"log_every": 10**9, "pop_log_points": 2})
    scal = population.state_scalars(res.problem, res.state["W"], res.state["p"], res.state["nu"])
    roles = np.repeat(np.arange(4), ds.role_counts)
    pts = population.population_points(cfg.T, cfg.pop_points, np.random.default_rng(0))
    pop = population.Population(roles, cfg.rho, ds.sigma, pts, cfg.loss)
    D = np.ascontiguousarray(pts[0].reshape(-1, cfg.T).T)
    D = D - D.max(axis=0)
    tail_D = np.ascontiguousarray(pts[1])  # (class, T + 1, points)
    aq, anu = pop.class_means(scal[0], scal[1], scal[4], scal[5])
    wa = np.exp(aq - aq.max(axis=1, keepdims=True))
    sq = float(np.sqrt(scal[3]))
    s0, s1 = np.empty(2), np.empty(2)
    E, tail_E, cdf = np.empty_like(D), np.empty_like(tail_D), np.empty(2 * D.shape[1] + 2 * tail_D.shape[2])
    return pop, scal, (D, tail_D, sq, wa, anu, s0, s1, E, tail_E, cdf), (pts, aq, anu, sq)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20000, help="GD steps per block")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", help="also write the table as JSON here")
    args = ap.parse_args()

    from attnsim.models.attention import steppers

    cfg, pb, ds, prob = default_problem()
    X = np.ascontiguousarray(pb.X2)
    nT, k = X.shape
    r = pb.p0.size
    c = np.random.default_rng(0).standard_normal(nT) * 1e-3  # the floors' fixed loss coefficients
    q, z, g, gp, v = np.empty(k), np.empty(nT), np.empty(k), np.empty(r), np.empty(nT)
    rows = {}
    done = {"W": 2, "XW": 2}

    seg = steppers.Segment(prob)
    W, p = pb.W0.copy(), pb.p0.copy()

    def w_loop(m):
        seg.advance(done["W"], m)
        done["W"] += m

    rows["reduced GD step, W form"] = _pair(
        w_loop, lambda m: FK.reduced_step_floor(X, W, p, c, 1e-9, m, q, z, g, gp), args.steps, args.reps
    )
    xw = steppers.SegmentXW(prob)
    B, K, p2 = xw.B.copy(), np.ascontiguousarray(xw.K), pb.p0.copy()

    def xw_loop(m):
        xw.advance(done["XW"], m)
        done["XW"] += m

    rows["reduced GD step, X W form"] = _pair(
        xw_loop, lambda m: FK.reduced_xw_step_floor(B, K, p2, c, 1e-9, m, z, v, gp), args.steps, args.reps
    )
    field = steppers.FlowField(prob)
    theta = field.pack(pb.W0, pb.p0, pb.nu0, np.zeros(ds.y.size))
    out = np.empty(k * r + r)
    field.max_evals = 10**12
    calls = max(1, args.steps // 4)
    rows["flow vector field"] = _pair(
        _calls(lambda: field(0.0, theta)),
        _calls(lambda: FK.flow_rhs_floor(X, W, p, c, q, z, g, gp, out)),
        calls,
        args.reps,
    )
    pop, scal, fargs, (pts, aq, anu, sq) = population_floor_args(cfg, ds)
    D, tail_D, *_ = fargs
    evals = max(1, args.steps // 200)
    rows["population evaluation"] = _pair(
        _calls(lambda: pop.evaluate(*scal)), _calls(lambda: FK.population_floor(*fargs)), evals, args.reps
    )
    qhat_nu = scal[2] / sq
    tail_args = (
        aq,
        anu,
        ds.sigma * sq,
        ds.sigma * qhat_nu,
        ds.sigma * np.sqrt(max(scal[6] - qhat_nu**2, 0.0)),
    )
    U = np.empty((2 * cfg.T, tail_D.shape[2]))  # at most 2 T components per class
    rows["population evaluation (floor with the tail's design search and mixture weights)"] = _pair(
        _calls(lambda: pop.evaluate(*scal)),
        _calls(lambda: FK.population_floor_with_tail(pop, tail_args, *fargs, U)),
        evals,
        args.reps,
    )
    threads = os.environ["OPENBLAS_NUM_THREADS"]
    print(f"hot loops of the default problem (reduced, k = {k}, r = {r}, n T = {nT}) against their floors")
    print(
        f"BLAS threads {threads}; microseconds per call, median (min-max) of {args.reps} alternating blocks"
    )
    print(f"{'loop':28} {'attnsim':>22} {'floor':>22} {'x floor':>8}")
    for name, row in rows.items():
        a = f"{row['us']:.1f} ({row['us_min']:.1f}-{row['us_max']:.1f})"
        b = f"{row['floor_us']:.1f} ({row['floor_min']:.1f}-{row['floor_max']:.1f})"
        print(f"{name:28} {a:>22} {b:>22} {row['x_floor']:8.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"benchmark": "floors", "threads": threads, "k": k, "r": r, "tokens": nT,
                       "rows": rows}, fh, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
