"""The replica theory of positional and semantic attention (attnsim.models.positional_semantic.replica):
its quadrature rules, its proximal map, its fixed points against the published rows (Cui et al.,
theory/theory.ipynb, shipped in the package's published/ folder), the transition and the command line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from attnsim.cli import main
from attnsim.models.positional_semantic import replica as R
from attnsim.models.positional_semantic import replica_maps as maps
from attnsim.models.positional_semantic import replica_phases as phases
from attnsim.models.positional_semantic.published_data import BRANCHES, replica_rows

ROWS_TOL = 3e-3  # the published rule against every omega = 0.3 row (measured worst 1.8e-3, theta)
ROW2_TOL = 2.5e-4  # ... against the alpha = 2 row (measured worst 1.9e-4, V)


def rows(omega: float, suffix: str) -> list[dict]:
    """The published file by its name's suffix ("" semantic, "_para", "_agno")."""
    return replica_rows(omega, {v: k for k, v in BRANCHES.items()}[suffix])


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def moments(rule, a: int, b: int) -> float:
    p, w = rule
    return float(w @ (p[:, 0] ** a * p[:, 1] ** b))


def normal_moment(k: int) -> float:
    return 0.0 if k % 2 else float(math.prod(range(k - 1, 0, -2)))


@pytest.mark.parametrize(
    "rule, degree",
    [(R.stroud_secrest_6(), 7), (R.rabinowitz_richter_2(), 11), (R.gauss_hermite(5), 9)],
    ids=["stroud-secrest-6", "rabinowitz-richter-2", "gauss-hermite-5"],
)
def test_rules_integrate_gaussian_moments_up_to_their_degree(rule, degree):
    for a in range(degree + 1):
        for b in range(degree + 1 - a):
            exact = normal_moment(a) * normal_moment(b)
            assert moments(rule, a, b) == pytest.approx(exact, rel=1e-12, abs=1e-12), (a, b)
    # and not beyond it (a rule that integrated everything would make the check above empty)
    top = degree + 1
    misses = [
        abs(moments(rule, a, top - a) - normal_moment(a) * normal_moment(top - a)) for a in range(top + 1)
    ]
    assert max(misses) > 1e-6


def test_energy_gradient_and_hessian_against_central_differences():
    rng = np.random.default_rng(0)
    x, y, h1, h2 = 1.5 * rng.normal(size=(4, 200))
    M = R._mixing(rng.normal(size=200), rng.normal(size=200), 0.3, R.TEACHER_A)
    V, s2, e = 12.0, 0.25, 1e-5
    E, gx, gy, hxx, hxy, hyy = maps._attention_energy(x, y, h1, h2, M, V, s2)

    def f(a, b, i=0):
        return maps._attention_energy(a, b, h1, h2, M, V, s2)[i]

    fd = {
        "gx": ((f(x + e, y) - f(x - e, y)) / (2 * e), gx),
        "gy": ((f(x, y + e) - f(x, y - e)) / (2 * e), gy),
        "hxx": ((f(x + e, y, 1) - f(x - e, y, 1)) / (2 * e), hxx),
        "hxy": ((f(x, y + e, 1) - f(x, y - e, 1)) / (2 * e), hxy),
        "hyy": ((f(x, y + e, 2) - f(x, y - e, 2)) / (2 * e), hyy),
    }
    for name, (num, ana) in fd.items():
        err = np.abs(num - ana)
        assert err.max() < 1e-8 and err.mean() < 1e-9, name


def test_prox_finds_the_global_minimum_of_a_grid_search():
    rng = np.random.default_rng(1)
    n = 40
    h1, h2 = 1.5 * rng.normal(size=(2, n))
    M = R._mixing(rng.normal(size=n), rng.normal(size=n), 0.3, R.TEACHER_A)
    V, s2 = 14.0, 0.25
    x, y, E, ok = R.prox(h1, h2, M, V, s2)
    assert ok.all()
    grid = np.linspace(-8, 8, 801)
    GX, GY = np.meshgrid(grid, grid, indexing="ij")
    for i in range(n):
        Eg = maps._attention_energy(GX, GY, h1[i], h2[i], M[i], V, s2, order=0)
        assert E[i] <= Eg.min() + 1e-12  # no grid point lower than the answer
        assert np.hypot(x[i] - GX.flat[Eg.argmin()], y[i] - GY.flat[Eg.argmin()]) < 0.1


def test_the_notebooks_proximal_map_stops_at_a_minimum_never_below_the_global_one():
    """prox_from_origin (BFGS from the origin, the published notebook's map): a stationary point
    (gradient below 1e-5, its tolerance), never lower than attnsim's global minimum, and at an
    agnostic-like state (small fields, V = 30) sometimes a local minimum above it."""
    rng = np.random.default_rng(2)
    n = 40
    for V, local in ((14.0, 0), (30.0, 2)):
        h1, h2 = 0.3 * rng.normal(size=(2, n))
        M = R._mixing(0.5 * rng.normal(size=n), 0.5 * rng.normal(size=n), 0.3, R.TEACHER_A)
        x, y, E, ok = R.prox_from_origin(h1, h2, M, V, 0.25)
        _, _, E_global, _ = R.prox(h1, h2, M, V, 0.25)
        _, gx, gy, *_ = maps._attention_energy(x, y, h1, h2, M, V, 0.25)
        assert ok.all() and max(np.abs(gx).max(), np.abs(gy).max()) < 1e-5
        assert (E >= E_global - 1e-12).all() and (E > E_global + 1e-6).sum() == local
    with pytest.raises(R.ReplicaError, match="proximal"):
        R.iterate(R.Settings(), proximal="newton")


def check_row(sol: R.Solution, row: dict, tol: float) -> dict:
    assert sol.converged, sol.message
    errors = {
        k: rel(getattr(sol, k), row[k]) for k in ("q", "V", "theta", "mse", "Phi") if abs(row[k]) > 1e-6
    }
    errors["m"] = abs(sol.m - row["m"])  # 0 on the semantic branch: absolute
    assert max(errors.values()) < tol, errors
    return errors


def test_published_rule_reproduces_the_alpha_2_semantic_row():
    row = rows(0.3, "")[0]
    assert row["alpha"] == 2.0
    check_row(R.iterate(R.Settings(alpha=2.0), "semantic", rule="published"), row, ROW2_TOL)


def test_the_rows_sit_1e3_from_their_rules_fixed_point():
    """Why 1e-4 relative is below what the rows resolve: the notebook stops when an update moves q,
    m and theta by less than 1e-4 absolute, short of its rule's fixed point; at alpha = 2 the
    fixed point (iterated to 1e-8) lies 1.3e-3 (V), 7e-4 (theta) and 3e-3 (mse) from the row,
    and only the stopped path reaches the row within 2.5e-4."""
    row = rows(0.3, "")[0]
    s = R.Settings(alpha=2.0)
    fixed = R.iterate(s, "semantic", rule="published", published_stop=0.0, anderson=4)
    stopped = R.iterate(s, "semantic", rule="published")
    assert fixed.converged and stopped.converged
    assert rel(fixed.V, row["V"]) > 1e-3 and rel(fixed.theta, row["theta"]) > 5e-4
    assert rel(fixed.mse, row["mse"]) > 2e-3
    assert max(rel(getattr(stopped, k), row[k]) for k in ("q", "V", "theta")) < 2.5e-4


@pytest.mark.slow
@pytest.mark.parametrize("branch, suffix", [("semantic", ""), ("positional", "_para")])
def test_published_rule_reproduces_every_omega_03_row(branch, suffix):
    worst = {}
    for row in rows(0.3, suffix):
        sol = R.iterate(R.Settings(alpha=row["alpha"], omega=0.3), branch, rule="published")
        for k, v in check_row(sol, row, ROWS_TOL).items():
            worst[k] = max(worst.get(k, 0.0), v)
    print(branch, worst)


def test_the_published_rows_carry_noise_of_their_optimizer_above_1e4():
    """Why 1e-4 relative cannot be met: the notebook's proximal map is scipy's BFGS from the origin
    (gradient tolerance 1e-5); its minima sit about 4e-5 from the exact ones, which moves one
    update of q by more than 1e-4 relative at the published alpha = 2 row."""
    from scipy.optimize import minimize

    s, row = R.Settings(alpha=2.0), rows(0.3, "")[0]
    state = (row["q"], row["m"], row["V"], row["theta"])
    rules = R._rules("published", None)
    exact, (x, y), _ = R.conjugates(state, s, rules)
    h1, h2, M, *_ = R._fields(state, s, rules.eqs, rules.eqs)
    h1, h2 = np.broadcast_arrays(h1, h2, M[..., 0, 0])[:2]
    bx, by = np.empty_like(x), np.empty_like(y)
    for i in np.ndindex(x.shape):

        def energy(z, i=i):
            return float(maps._attention_energy(z[0], z[1], h1[i], h2[i], M[i], state[2], 0.25, order=0))

        bx[i], by[i] = minimize(energy, [0.0, 0.0]).x
    gap = max(np.abs(bx - x).max(), np.abs(by - y).max())
    assert 1e-5 < gap < 1e-4
    moved = np.array(R.overlaps(R.hats_at(state, s, rules, bx, by), s))
    exact = np.array(R.overlaps(exact, s))
    q_exact, q_bfgs = exact[0], moved[0]
    assert rel(q_bfgs, q_exact) > 1e-4


def teacher_constant(state, s: R.Settings, rules) -> float:
    """alpha/2 sigma^2 E|M|^2, the part of Phi that depends on the teacher only."""
    *_, M, _, _, wx, wy, _ = R._fields(state, s, rules.outer, rules.outer)
    W = wx[:, None] * wy[None, :]
    return s.alpha / 2 * s.sigma**2 * float((W * (M**2).sum(axis=(-1, -2))).sum())


def test_omega_05_rows_omit_a_constant_of_the_teacher_from_phi():
    """At each omega = 0.5 row's own state and conjugates, the published rule's Phi falls short of
    the file's by alpha/2 sigma^2 E|M|^2 plus 4.686e-4 alpha, the same on both branches: a
    constant of the teacher (a little more than E|M|^2), so it moves no crossing. The omega = 0.3
    files keep it (their Phi agrees within 1e-6 alpha)."""
    rules = R._rules("published", None)

    def shortfall(row, omega):
        s = R.Settings(alpha=row["alpha"], omega=omega)
        state = (row["q"], row["m"], row["V"], row["theta"])
        hats, _, _ = R.conjugates(state, s, rules)
        phi, _ = R.free_energy(state, hats, s, rules)
        return (row["Phi"] - phi) / s.alpha, teacher_constant(state, s, rules) / s.alpha

    for suffix in ("", "_para"):
        for row in rows(0.5, suffix)[::4]:
            per_alpha, constant = shortfall(row, 0.5)
            assert abs(per_alpha - constant - 4.686e-4) < 1e-6, (suffix, row["alpha"], per_alpha - constant)
        for row in rows(0.3, suffix)[::6]:
            assert abs(shortfall(row, 0.3)[0]) < 1e-6


def stop_residual(row: dict, omega: float, rules, agnostic: bool = False) -> float:
    """The largest move of q, m and theta an undamped update makes from the row's own state: the
    notebook stopped when it fell below its tolerance."""
    s = R.Settings(alpha=row["alpha"], omega=omega)
    state = (row["q"], 0.0 if agnostic else row["m"], row["V"], 0.0 if agnostic else row["theta"])
    hats, _, _ = R.conjugates(state, s, rules)
    move = np.abs(np.array(R.overlaps(hats, s)) - state)[[0, 1, 3]]
    return float(move[0] if agnostic else move.max())


def test_each_published_file_stopped_at_its_own_tolerance():
    """Why the omega = 0.5 and agnostic files are not reproduced from the notebook's stop: they
    were made with a ten times looser one. From every omega = 0.3 row an update moves q, m and
    theta by about 1e-4 (the published stop; the rows' own BFGS noise lifts the largest to
    1.02e-4); from every omega = 0.5 row by 1.6e-4 to 9.4e-4: the rows stopped at 1e-3. The
    agnostic rows are stop points (q moves 6.2e-4 to 8.1e-4) only with the notebook's proximal
    map, BFGS from the origin, which there answers a local minimum: with the global one q moves
    up to 1.7e-2 (ERM's agnostic fixed point is 10-20 % away)."""
    rules = R._rules("published", None)
    at_03 = [stop_residual(row, 0.3, rules) for row in rows(0.3, "")]
    assert max(at_03) < 1.1e-4
    at_05 = [stop_residual(row, 0.5, rules) for sfx in ("", "_para") for row in rows(0.5, sfx)]
    assert max(at_05) < 1e-3 and min(at_05) > 1.5e-4, (min(at_05), max(at_05))
    agno = rows(0.3, "_agno")
    notebook = R._rules("published", None, proximal="notebook")
    local = [stop_residual(row, 0.3, notebook, agnostic=True) for row in agno]
    assert 1e-4 < min(local) and max(local) < 1e-3, local
    exact = [stop_residual(row, 0.3, rules, agnostic=True) for row in agno]
    assert max(exact) > 1e-2 and sum(r > 1e-3 for r in exact) >= 9, exact


@pytest.mark.slow
def test_continuation_with_the_loose_stop_reproduces_the_omega_05_semantic_file():
    """The omega = 0.5 semantic file is the published rule's curve by continuation (each alpha
    from the previous answer, descending) with a 1e-3 stop: every row within the stop's own
    resolution (measured worst q 2.1e-3, V 4.3e-3, theta 1.2e-2 at alpha 0.26, mse 2.7e-3), where
    the notebook's own recipe (every alpha from the start, 1e-4 stop) misses the smallest alpha by
    5 % in q and 16 % in theta."""
    file = rows(0.5, "")
    sols = phases.curve(
        [r["alpha"] for r in file], "semantic", omega=0.5, rule="published", published_stop=1e-3
    )
    worst = {}
    for sol, row in zip(sols, file):
        assert sol.converged, sol.message
        for k in ("q", "V", "theta", "mse"):
            worst[k] = max(worst.get(k, 0.0), rel(getattr(sol, k), row[k]))
        assert abs(sol.m - row["m"]) < 1e-4
    assert worst["q"] < 3e-3 and worst["V"] < 6e-3 and worst["theta"] < 1.5e-2 and worst["mse"] < 4e-3, worst
    cold = R.iterate(R.Settings(alpha=file[-1]["alpha"], omega=0.5), "semantic", rule="published")
    assert rel(cold.q, file[-1]["q"]) > 0.04 and rel(cold.theta, file[-1]["theta"]) > 0.1


@pytest.mark.slow
def test_the_agnostic_file_is_the_notebooks_local_proximal_branch():
    """From (q, m, V, theta) = (0.1, 0, 26, 0) with the files' 1e-3 stop, the notebook's proximal
    map (BFGS from the origin) lands within 5e-4 (q) and 8e-4 (V) of the file's first row, the
    global minimum 9 % and 6 % away (its fixed point: 12 % and 11 %)."""
    row = rows(0.3, "_agno")[0]
    s, start = R.Settings(alpha=row["alpha"], omega=0.3), (0.1, 0.0, 26.0, 0.0)
    kw = {"rule": "published", "published_stop": 1e-3, "start": start}
    local = R.iterate(s, "agnostic", proximal="notebook", **kw)
    exact = R.iterate(s, "agnostic", **kw)
    assert local.converged and exact.converged
    assert rel(local.q, row["q"]) < 2e-3 and rel(local.V, row["V"]) < 2e-3
    assert rel(exact.q, row["q"]) > 0.05 and rel(exact.V, row["V"]) > 0.04


def test_anderson_and_the_plain_damped_iteration_reach_one_fixed_point():
    s = R.Settings(alpha=2.0)
    fast = R.iterate(s, "semantic", order=6)
    slow = R.iterate(s, "semantic", order=6, anderson=0)
    assert fast.converged and slow.converged and fast.iterations < slow.iterations
    for k in ("q", "V", "theta", "mse", "Phi"):
        assert rel(getattr(fast, k), getattr(slow, k)) < 1e-6, k


def test_agnostic_branch_holds_m_and_theta_at_zero_and_loses_to_both():
    s = R.Settings(alpha=2.0)
    sols = {b: R.iterate(s, b, order=6) for b in R.BRANCHES}
    assert sols["agnostic"].m == 0.0 and sols["agnostic"].theta == 0.0
    assert sols["positional"].m > 0.2 and sols["semantic"].theta > 0.1
    assert sols["agnostic"].Phi < min(sols["semantic"].Phi, sols["positional"].Phi)
    assert phases.classify(sols["semantic"], sols["positional"]) == "semantic"  # alpha = 2 > alpha_c(0.3)


def test_non_convergence_is_reported_not_a_number():
    sol = R.iterate(R.Settings(alpha=2.0), "semantic", order=6, max_iter=2)
    assert not sol.converged and sol.q is None and sol.mse is None and "did not converge" in sol.message
    assert sol.empirical()["gen_error"] is None
    coarse = R.solve(R.Settings(alpha=2.0), "positional", int_tol=1e-9, orders=(5, 6))
    assert not coarse.converged and "still moves" in coarse.message and coarse.integration_error > 1e-9


@pytest.mark.parametrize(
    "kw, key",
    [
        ({"alpha": 0}, "alpha"),
        ({"omega": 1.5}, "omega"),
        ({"sigma": float("nan")}, "sigma"),
        ({"weight_decay": 0.0}, "weight_decay"),
        ({"teacher_A": [[1.0, 0.0, 0.0]] * 3}, "teacher_A"),
    ],
)
def test_bad_settings_name_their_key(kw, key):
    with pytest.raises(R.ReplicaError, match=key):
        R.Settings(**kw)
    with pytest.raises(R.ReplicaError, match="branch"):
        R.iterate(R.Settings(), "both")


@pytest.mark.slow
def test_transition_at_omega_03_is_where_the_published_rows_cross():
    """alpha_c(0.3) with the published rule against the crossing of the published rows' own Phi
    (linear interpolation between their alpha grid points)."""
    sem, pos = rows(0.3, ""), rows(0.3, "_para")
    alphas = sorted({r["alpha"] for r in sem} & {r["alpha"] for r in pos})
    gap = {
        a: next(r["Phi"] for r in sem if r["alpha"] == a) - next(r["Phi"] for r in pos if r["alpha"] == a)
        for a in alphas
    }
    lo = max(a for a in alphas if gap[a] < 0)
    hi = min(a for a in alphas if a > lo)
    crossing = lo + (hi - lo) * (-gap[lo]) / (gap[hi] - gap[lo])
    alpha_c = phases.transition(0.3, 1.1, 1.4, rule="published")
    assert abs(alpha_c - crossing) < 5e-3, (alpha_c, crossing)


@pytest.mark.slow
def test_at_omega_0_the_published_rules_phi_error_exceeds_the_branches_gap():
    """Why the published line cannot be matched at small omega: the branches' Phi cross at a
    shallow angle there. At omega = 0 Gauss-Hermite puts alpha_c between 0.55 and 0.65 (the
    published line: 0.548); at alpha = 0.55 the published rule's own Phi error is larger than
    the gap between the branches, so with that rule the crossing can sit anywhere the gap is
    smaller than its error. Order 10 here (gap -2.2e-5, rule error 2.9e-5; a third of order
    12's time); the docs quote order 12 and 16, which keep the same order of the numbers."""
    s55, s65 = R.Settings(alpha=0.55, omega=0.0), R.Settings(alpha=0.65, omega=0.0)
    gh = {b: R.iterate(s55, b, order=10).Phi for b in ("semantic", "positional")}
    pub = {b: R.iterate(s55, b, rule="published").Phi for b in ("semantic", "positional")}
    gap55 = gh["semantic"] - gh["positional"]
    gap65 = R.iterate(s65, "semantic", order=10).Phi - R.iterate(s65, "positional", order=10).Phi
    assert gap55 < 0.0 < gap65  # alpha_c in (0.55, 0.65), right of the published 0.548
    rule_error = max(abs(pub[b] - gh[b]) for b in gh)
    assert rule_error > abs(gap55), (rule_error, gap55)


def test_cli_prints_the_published_rule_as_json(capsys):
    code = main(["theory", "positional_semantic", "--rule", "published", "--set", "alpha=2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["converged"] and out["branch"] == "semantic"
    assert rel(out["q"], rows(0.3, "")[0]["q"]) < ROW2_TOL
    assert set(out) >= {"q", "m", "V", "theta", "mse", "Phi", "converged", "settings"}


def test_cli_text_and_refusals(capsys, monkeypatch):
    monkeypatch.setattr(R, "ORDERS", (5, 6))
    assert main(["theory", "positional_semantic", "--set", "alpha=1", "--int-tol", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "semantic branch at alpha = 1" in out and "order 6" in out and "gen error" in out
    assert main(["theory", "positional_semantic", "--set", "d=100"]) == 2
    assert "takes only" in capsys.readouterr().err
    assert main(["theory", "positional_semantic", "--set", "omega=2"]) == 2
    assert "omega" in capsys.readouterr().err
    code = main(["theory", "positional_semantic", "--branch", "positional", "--int-tol", "1e-9", "--json"])
    captured = capsys.readouterr()
    assert code == 1 and json.loads(captured.out)["q"] is None and "not converged" in captured.err


@pytest.mark.parametrize("rule, order, warm", [("gauss-hermite", 8, False), ("gauss-hermite", 12, True),
                                               ("published", None, False)])  # fmt: skip
def test_the_compiled_proximal_map_is_the_numpy_one_to_its_stop(rule, order, warm):
    """replica_kernels runs replica_maps.prox's Newton method point by point: same starts, shift,
    line search and stop. NumPy's exp and the compiled one may differ in the last bit (NumPy's
    SIMD exp: numpy 2.4), so the two can stop one Newton step apart: (x, y) agree to the stop's
    1e-10 (1 + |x| + |y|), E (flat at a minimum) and the converged flags to rounding."""
    from attnsim.models.positional_semantic.replica_kernels import prox_compiled

    s = R.Settings(alpha=1.5, omega=0.3)
    rules = R._rules(rule, order)
    for state in (R.STARTS["semantic"], R.STARTS["positional"], (0.3, 0.1, 5.0, 0.05)):
        h1, h2, M, *_ = R._fields(state, s, rules.eqs, rules.eqs)
        ref = maps.prox(h1, h2, M, state[2], s.sigma**2)
        start = (ref[0] + 0.1, ref[1] - 0.1) if warm else None
        if warm:
            ref = maps.prox(h1, h2, M, state[2], s.sigma**2, start)
        got = prox_compiled(h1, h2, M, state[2], s.sigma**2, start)
        stop = 2e-10 * (1 + np.abs(ref[0]) + np.abs(ref[1]))
        assert (np.abs(got[0] - ref[0]) <= stop).all() and (np.abs(got[1] - ref[1]) <= stop).all()
        np.testing.assert_allclose(got[2], ref[2], rtol=1e-13, atol=1e-15)
        assert np.array_equal(ref[3], got[3])


def test_the_solver_uses_the_compiled_map_and_gets_the_numpy_maps_fixed_point():
    s = R.Settings(alpha=1.5, omega=0.3)
    a = R.iterate(s, "semantic", order=8)
    b = R.iterate(s, "semantic", order=8, proximal="numpy")
    assert R._rules("gauss-hermite", 8).prox is maps.PROXIMAL["global"]
    assert a.converged and b.converged and abs(a.iterations - b.iterations) <= 1
    for key in ("q", "m", "V", "theta", "mse", "Phi"):  # one fixed point to the iteration's tol
        assert getattr(a, key) == pytest.approx(getattr(b, key), rel=1e-8, abs=1e-12), key


@pytest.mark.parametrize("proximal", ["global", "numpy"])
def test_tracking_follows_each_maps_own_minimum_from_its_warm_start(proximal):
    """track=True runs Newton from the warm start alone: at a global answer it stays there; from a
    point in another basin it ends at that basin's (local) minimum, never below the global one."""
    s = R.Settings(alpha=1.5, omega=0.3)
    rules = R._rules("gauss-hermite", 8, proximal)
    state = R.STARTS["semantic"]
    h1, h2, M, *_ = R._fields(state, s, rules.eqs, rules.eqs)
    x, y, E, ok = rules.prox(h1, h2, M, state[2], s.sigma**2)
    tx, ty, tE, tok = rules.prox(h1, h2, M, state[2], s.sigma**2, (x, y), True)
    assert ok.all() and tok.all() and np.abs(tx - x).max() < 1e-8 and np.abs(ty - y).max() < 1e-8
    origin = (np.zeros_like(x), np.zeros_like(y))  # the origin's basin is a local one at some nodes
    fx, fy, fE, fok = rules.prox(h1, h2, M, state[2], s.sigma**2, origin, True)
    assert fok.all() and (fE >= E - 1e-12).all() and (fE > E + 1e-6).sum() > 50
    with pytest.raises(ValueError, match="warm start"):
        rules.prox(h1, h2, M, state[2], s.sigma**2, None, True)


@pytest.mark.parametrize("branch, alpha", [("semantic", 1.5), ("positional", 1.5), ("semantic", 0.6)])
def test_tracking_reaches_the_global_maps_fixed_point(branch, alpha):
    """The tracked iteration's stop is the global map's (checked there), so it returns that map's
    fixed point to the iteration's tol, and Phi from the global minima."""
    s = R.Settings(alpha=alpha, omega=0.3)
    a = R.iterate(s, branch, order=8, track=True)
    b = R.iterate(s, branch, order=8, track=False)
    assert a.converged and b.converged
    for key in ("q", "m", "V", "theta", "mse", "Phi"):
        assert getattr(a, key) == pytest.approx(getattr(b, key), rel=1e-7, abs=1e-9), key
    rules = R._rules("gauss-hermite", 8)
    hats, _, _ = R.conjugates(a.state(), s, rules)  # the global map at the returned state
    new = np.array(R.overlaps(hats, s))
    assert np.all(np.abs(new - a.state()) <= 1e-8 * np.maximum(np.abs(new), [0, 0.1, 0, 0.1]))
    assert R.free_energy(a.state(), hats, s, rules)[0] == pytest.approx(a.Phi, rel=1e-12)


def test_a_long_solve_says_how_far_it_is_every_two_seconds(monkeypatch):
    """F09 of the second hostile pass: minutes at omega = 0 with nothing said. The iteration tells
    its progress callback how far it is every PROGRESS_S seconds (0 here: every iteration)."""
    monkeypatch.setattr(R, "PROGRESS_S", 0.0)
    said = []
    sol = R.solve(R.Settings(alpha=1.5, omega=0.3), "semantic", orders=(8,), progress=said.append)
    assert not sol.converged and "one Gauss-Hermite order (8) gives no accuracy check" in sol.message
    steps = [m for m in said if "iteration" in m]
    assert len(steps) >= 3 and all(m.startswith("semantic: order 8: iteration ") for m in steps), said
