"""The g-law, its inverse, gaps, times, and gradient flow against closed forms."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnsim
from attnsim import theory


@pytest.mark.parametrize("m", [1.0, 7.0, 100.0])
def test_g_inverse_round_trip_over_a_wide_range(m):
    x = np.concatenate([np.linspace(-700, 700, 2001), [-1e-300, 0.0, 1e-300, math.log(m)]])
    back = theory.g_inv(theory.g(x, m), m)
    np.testing.assert_allclose(back, x, rtol=1e-12, atol=1e-12)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-1e300, max_value=1e300, allow_nan=False), st.floats(min_value=1.0, max_value=1e6))
def test_g_inverse_solves_g_for_any_real(y, m):
    x = theory.g_inv(y, m)
    assert np.isfinite(x)
    gx = theory.g(x, m)
    # relative accuracy in y where g is steep, absolute near the origin
    assert abs(gx - y) <= 1e-9 * max(1.0, abs(y))


def test_g_inverse_edge_cases_and_monotone():
    m = 7.0
    assert theory.g_inv(np.inf, m) == np.inf and theory.g_inv(-np.inf, m) == -np.inf
    assert np.isnan(theory.g_inv(np.nan, m))
    y = np.sort(np.concatenate([-np.logspace(-5, 300, 200), np.logspace(-5, 300, 200)]))
    assert np.all(np.diff(theory.g_inv(y, m)) > 0)
    assert theory.g_inv(np.array([]), m).shape == (0,)


def test_gap_law_asymptotics():
    m, c = 7.0, 0.01
    tau = np.array([1e6, 1e8])
    x = theory.gap_law(0.0, c, tau, m)
    np.testing.assert_allclose(x, np.log(m * c * tau), rtol=1e-3)  # x ~ log(m c tau)
    s = np.exp(x) / (np.exp(x) + m)
    np.testing.assert_allclose(1 - s, 1 / (c * tau), rtol=1e-2)


def test_gaps_on_a_hand_built_example():
    # one clean sample (relevant token 0) and one noisy sample (y = -1)
    logits = np.array([[[3.0, 1.0, 0.0], [0.0, 2.0, 5.0]]])  # (L=1, n=2, T=3)
    roles = np.array([[0, 3, 3], [0, 3, 3]])
    final_s = np.array([[0.8, 0.1, 0.1], [0.1, 0.3, 0.6]])
    final_u = np.array([[1.0, 0.0, 0.0], [1.0, -0.5, -0.2]])  # tokens 1, 2 agree with y = -1
    y, noisy = np.array([1.0, -1.0]), np.array([False, True])
    out = theory.gap_summaries(logits, roles, final_s, final_u, y, noisy, per_sample=True)
    np.testing.assert_array_equal(out["gap_token"], [0, 2])  # noisy: highest score among agreeing
    np.testing.assert_allclose(out["gaps"][0, 0], [np.nan, 2.0, 3.0])
    np.testing.assert_allclose(out["gaps"][0, 1], [5.0, 3.0, np.nan])
    assert out["gap_clean_min"][0] == 2.0 and out["gap_clean_mean"][0] == 2.5
    assert out["gap_noisy_min"][0] == 3.0 and out["gap_noisy_mean"][0] == 4.0
    eff = 3.0 - math.log(math.exp(1.0) + 1.0) + math.log(2)
    assert out["gap_clean_eff"][0] == pytest.approx(eff)
    s0 = math.exp(3) / (math.exp(3) + math.exp(1) + 1)
    assert s0 == pytest.approx(math.exp(eff) / (math.exp(eff) + 2))  # the effective gap is exact


def test_times_on_a_hand_built_trajectory():
    assert theory.memorization_time(np.array([3, 10, 7])) == 10
    assert theory.memorization_time(np.array([3, -1])) is None
    steps = np.array([0, 10, 20, 30, 40])
    score = np.array([0.1, 0.6, 0.4, 0.55, 0.7])
    assert theory.stays_above_time(steps, score, 0.5) == 30
    assert theory.stays_above_time(steps, np.array([0.1, 0.2, 0.3, 0.4, 0.45]), 0.5) is None
    assert theory.stays_above_time(steps, np.array([0.6, np.nan, 0.7, np.nan, 0.8]), 0.5) == 0
    loss = np.array([1.0, 0.6, 0.5, 0.503, 0.5])
    assert theory.settle_time(steps, loss, 0.01) == 20


def _exact_construction(tmp_path, T=8, a=1.5, du=2.0):
    """Two decoupled samples, orthonormal equal-norm tokens, equal competitor values."""
    d = 2 * T
    X = np.zeros((2, T, d))
    X[0, :, :T] = a * np.eye(T)
    X[1, :, T:] = a * np.eye(T)
    nu = np.zeros(d)
    nu[0], nu[T] = du / a, -du / a  # u = +du on sample 0's token 0, -du on sample 1's
    roles = np.full((2, T), 3)
    roles[:, 0] = 0
    path = tmp_path / "exact.npz"
    np.savez(path, X=X, y=np.array([1.0, -1.0]), nu=nu, roles=roles, W0=np.eye(d), p0=np.zeros(d))
    return path


def test_flow_follows_the_g_law_exactly_in_the_exact_construction(tmp_path):
    T, a, du, lr = 8, 1.5, 2.0, 5e-3
    path = _exact_construction(tmp_path, T, a, du)
    cfg = {"train": "p", "loss": "linear", "integrator": "flow", "lr": lr, "steps": 4000, "log_every": 100}
    r = attnsim.simulate(cfg, data=path)
    m = T - 1
    c = lr * a * a * du * (1 + 1 / m) / 2  # per step; the 1/n = 1/2 of the mean loss
    pred = theory.gap_law(0.0, c, r.trajectory["step"], m)
    assert np.max(np.abs(r.trajectory["gap_clean_eff"] - pred)) <= 1e-3
    assert np.max(np.abs(r.trajectory["gap_clean_min"] - pred)) <= 1e-3  # equal competitors
    # GD approaches the law with an error proportional to lr (unit tokens and values)
    path = _exact_construction(tmp_path, T, 1.0, 1.0)
    errs = []
    for lr_gd in (5e-3, 2.5e-3):
        gd = attnsim.simulate({**cfg, "integrator": "gd", "lr": lr_gd, "steps": int(20 / lr_gd)}, data=path)
        c = lr_gd * (1 + 1 / m) / 2
        errs.append(
            np.max(np.abs(gd.trajectory["gap_clean_eff"] - theory.gap_law(0.0, c, gd.trajectory["step"], m)))
        )
    assert errs[0] < 4e-4 and errs[1] == pytest.approx(errs[0] / 2, rel=0.1)


def test_flow_matches_a_closed_form_on_a_linear_problem(tmp_path):
    # train nu only with the linear loss: the gradient is constant, nu(t) = nu0 - t g
    rng = np.random.default_rng(0)
    X = rng.standard_normal((4, 3, 5))
    y = np.array([1.0, 1.0, -1.0, -1.0])
    W0, p0, nu0 = rng.standard_normal((5, 5)), rng.standard_normal(5), rng.standard_normal(5)
    path = tmp_path / "lin.npz"
    np.savez(path, X=X, y=y, W0=W0, p0=p0, nu=nu0)
    cfg = {"train": "nu", "loss": "linear", "integrator": "flow", "lr": 0.1, "steps": 50, "log_every": 10}
    r = attnsim.simulate(cfg, data=path)
    from attnsim.models.attention import reference as model

    g_nu = model.grads(X, y, W0, p0, nu0, "linear")[2]
    for step, L in zip(r.trajectory["step"], r.trajectory["train_loss"]):
        nu = nu0 - 0.1 * step * g_nu
        assert L == pytest.approx(model.loss(X, y, W0, p0, nu, "linear"), rel=1e-9, abs=1e-12)


def test_gd_converges_to_flow_linearly_in_lr():
    base = {"n": 6, "T": 5, "d": 60, "signal_norm": 5.0, "pop_points": 256, "log_every": 10**9}
    t_end = 2.0
    flow = attnsim.simulate({**base, "integrator": "flow", "lr": 0.01, "steps": 200}).final["train_loss"]
    errs = []
    for lr in (0.04, 0.02, 0.01):
        steps = int(round(t_end / lr))
        gd = attnsim.simulate({**base, "lr": lr, "steps": steps}).final["train_loss"]
        errs.append(abs(gd - flow))
    assert errs[0] > errs[1] > errs[2] > 0
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    np.testing.assert_allclose(ratios, 2.0, rtol=0.15)


@pytest.mark.slow
def test_flow_agrees_with_gd_at_the_default_run():
    gd = attnsim.simulate({"log_every": 50})
    fl = attnsim.simulate({"log_every": 50, "integrator": "flow"})
    for key in ("train_loss", "pop_loss", "pop_error", "score_noisy_weak_opposite", "score_noisy_irrelevant"):
        np.testing.assert_allclose(fl.trajectory[key], gd.trajectory[key], atol=1e-3, err_msg=key)
    # during the fast rise of the relevant token GD at lr = 5e-3 trails the flow
    # by up to ~4e-3 in score and ~1.5e-2 in gap: a first-order discretization
    # error (checked below by halving lr and by Richardson extrapolation)
    for key in ("score_clean_relevant", "pop_score_relevant"):
        np.testing.assert_allclose(fl.trajectory[key], gd.trajectory[key], atol=5e-3, err_msg=key)
    for key in ("gap_clean_eff", "gap_noisy_eff", "gap_clean_min", "gap_noisy_min"):
        np.testing.assert_allclose(fl.trajectory[key], gd.trajectory[key], atol=2e-2, err_msg=key)


@pytest.mark.slow
def test_gd_richardson_extrapolation_converges_to_flow():
    key = "score_clean_relevant"
    flow = attnsim.simulate({"log_every": 10, "integrator": "flow", "steps": 200}).trajectory[key]
    gd = {
        f: attnsim.simulate({"log_every": 10 * f, "lr": 5e-3 / f, "steps": 200 * f}).trajectory[key]
        for f in (1, 2)
    }
    err1, err2 = np.abs(gd[1] - flow).max(), np.abs(gd[2] - flow).max()
    assert err2 == pytest.approx(err1 / 2, rel=0.05)  # first order in lr
    assert np.abs(2 * gd[2] - gd[1] - flow).max() < 1e-4  # the O(lr) term cancels


def test_theory_section_is_consistent_with_the_trajectory():
    r = attnsim.simulate(
        {"n": 6, "T": 5, "d": 80, "steps": 300, "lr": 0.05, "pop_points": 256, "log_every": 5}
    )
    th, tr, fin = r.theory, r.trajectory, r.final
    assert th["snr"] == pytest.approx(20 / math.sqrt(80))
    assert th["n_snr2"] == pytest.approx(6 * 400 / 80)
    assert th["g_law_m"] == 4
    # memorization: the in-loop first-fit steps, and every sample fitted from then on
    assert fin["t_memorize"] == tr["fit_step"].max()
    j = list(tr["step"]).index(fin["t_memorize"]) if fin["t_memorize"] in tr["step"] else None
    after = tr["step"] >= fin["t_memorize"]
    assert np.all(tr["n_fitted"][after] == 6) and (j is None or j == 0 or tr["n_fitted"][j - 1] < 6)
    # selection: the fresh relevant score stays >= gen_score from t_select on
    ok = np.isfinite(tr["pop_score_relevant"])
    st, sc = tr["step"][ok], tr["pop_score_relevant"][ok]
    assert np.all(sc[st >= fin["t_select"]] >= 0.5) and np.any(sc[st < fin["t_select"]] < 0.5)
    # the fitted g-law reproduces the clean effective gap over its fitted range
    fit = th["g_law_clean"]
    steps = tr["step"][tr["step"] >= fit["from_step"]]
    law = theory.g_inv(fit["intercept"] + fit["rate"] * steps, th["g_law_m"])
    gap = tr["gap_clean_eff"][tr["step"] >= fit["from_step"]]
    assert np.max(np.abs(law - gap)) == pytest.approx(fit["max_dev"], rel=1e-9) and fit["max_dev"] < 1.0
    assert th["rate_clean"] == fit["rate"] > 0


def test_g_law_fit_recovers_a_known_rate():
    m, c, x0 = 7.0, 0.02, 2.5
    tau = np.linspace(0, 5000, 200)
    x = theory.gap_law(x0, c, tau, m)
    fit = theory.fit_rate(tau, x, m)
    assert fit["rate"] == pytest.approx(c, rel=1e-8)
    assert fit["intercept"] == pytest.approx(float(theory.g(x0, m)), rel=1e-8)
    assert fit["max_dev"] < 1e-8
