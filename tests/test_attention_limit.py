"""The max-margin limit: the att-SVM against a closed form, its KKT conditions
and its dual, infeasible selections, the hard-attention population limit
against fresh samples, the run's limit section, and refined times."""

import numpy as np
import pytest
from scipy.special import ndtr  # noqa: F401 - (used through the population module)

import attnsim
from attnsim.config import ConfigError
from attnsim.models.attention.limit import att_svm, constraint_rows, kkt_residual, local_optimality, w_svm
from attnsim.models.attention.population import Population, population_points


def _orthonormal_toy(T=5):
    """Two samples whose tokens are orthonormal, in orthogonal blocks: selecting
    token a of sample i gives q = sum_i (e_{i,a} - (1/T) sum_t e_{i,t}), |q|^2 = 2 (T-1)/T."""
    X = np.zeros((2, T, 2 * T))
    X[0, :, :T] = np.eye(T)
    X[1, :, T:] = np.eye(T)
    return X


@pytest.mark.parametrize("T", [2, 3, 8])
def test_att_svm_matches_the_closed_form(T):
    X = _orthonormal_toy(T)
    alpha = np.array([0, T - 1])
    sol = att_svm(X, alpha)
    expected = np.full(2 * T, -1.0 / T)
    expected[0] += 1.0
    expected[2 * T - 1] += 1.0
    assert sol.feasible
    np.testing.assert_allclose(sol.v, expected, atol=1e-12)
    assert sol.norm**2 == pytest.approx(2 * (T - 1) / T, rel=1e-12)
    assert sol.kkt < 1e-12 and sol.support == 2 * (T - 1)  # every constraint active


def test_att_svm_through_a_map_matches_the_closed_form():
    """With q = M p and M orthogonal, the p-space solution is M^T q_mm."""
    X = _orthonormal_toy(4)
    M = np.linalg.qr(np.random.default_rng(0).standard_normal((8, 8)))[0]
    q_mm = att_svm(X, np.array([1, 2])).v
    sol = att_svm(X, np.array([1, 2]), M=M)
    np.testing.assert_allclose(sol.v, M.T @ q_mm, atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_att_svm_kkt_and_strong_duality_on_random_instances(seed):
    rng = np.random.default_rng(seed)
    n, T, k = 12, 6, 90
    X = rng.standard_normal((n, T, k)) * rng.uniform(0.1, 10)
    alpha = rng.integers(0, T, n)
    M = rng.standard_normal((k, 70)) if seed % 2 else None
    sol = att_svm(X, alpha, M)
    G = constraint_rows(X, alpha) if M is None else constraint_rows(X, alpha) @ M
    assert sol.feasible and sol.kkt < 1e-10 and kkt_residual(G, sol.v, sol.dual) == sol.kkt
    primal = 0.5 * sol.v @ sol.v
    dual = sol.dual.sum() - 0.5 * np.sum((G.T @ sol.dual) ** 2)
    assert primal == pytest.approx(dual, rel=1e-10)
    assert np.min(G @ sol.v) >= 1 - 1e-10 and np.all(sol.dual >= 0)
    # no feasible point is shorter: perturbing along the active constraints breaks one
    for _ in range(20):
        w = sol.v + 1e-3 * rng.standard_normal(sol.v.size)
        assert np.min(G @ w) < 1 or w @ w > sol.v @ sol.v


def test_att_svm_detects_selections_no_direction_separates():
    # more constraints than dimensions with random signs: infeasible
    rng = np.random.default_rng(1)
    sol = att_svm(rng.standard_normal((10, 8, 5)), rng.integers(0, 8, 10))
    assert not sol.feasible and sol.v is None and "separates" in sol.message
    # the middle of three collinear tokens can never have the largest logit
    X = np.array([[[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0]]])
    assert not att_svm(X, np.array([0])).feasible
    # duplicated tokens: never strictly larger than its copy
    assert not att_svm(np.ones((1, 3, 4)), np.array([0])).feasible


@pytest.mark.slow
def test_hard_limit_population_matches_argmax_on_fresh_samples():
    roles = np.array([0, 1, 2, 3, 3, 3, 3, 3])
    pop = Population(roles, 0.1, 1.0, population_points(8, 4096, np.random.default_rng(0)))
    rng = np.random.default_rng(7)
    d, norm = 12, 5.0
    mu_p, mu_n = np.eye(d)[0] * norm, np.eye(d)[1] * norm
    q = 0.08 * (mu_p + mu_n) + 0.3 * rng.standard_normal(d)
    nu = (mu_p - mu_n) / np.linalg.norm(mu_p - mu_n) / norm + 0.05 * rng.standard_normal(d)
    out = pop.hard_limit(q @ mu_p, q @ mu_n, q @ nu, q @ q, nu @ mu_p, nu @ mu_n, nu @ nu)
    m = 400_000
    y = np.where(rng.random(m) < 0.5, 1.0, -1.0)
    own, other = np.where(y[:, None] > 0, mu_p, mu_n), np.where(y[:, None] > 0, mu_n, mu_p)
    c_own, c_oth = np.select([roles == 0, roles == 1], [1.0, 0.1], 0.0), np.where(roles == 2, 0.1, 0.0)
    X = rng.standard_normal((m, 8, d))
    X += c_own[None, :, None] * own[:, None, :] + c_oth[None, :, None] * other[:, None, :]
    star = (X @ q).argmax(axis=1)
    err = (y * (X[np.arange(m), star] @ nu) < 0).astype(float)
    rel = (roles[star] == 0).astype(float)
    for est, se, mc in (
        (out["pop_error"], out["pop_error_se"], err),
        (out["relevant_prob"], out["relevant_prob_se"], rel),
    ):
        assert abs(est - mc.mean()) < 4 * np.hypot(se, mc.std() / np.sqrt(m))
    assert sum(
        out[f"prob_{r}"] for r in ("relevant", "weak_aligned", "weak_opposite", "irrelevant")
    ) == pytest.approx(1)


def test_limit_needs_moving_logits():
    with pytest.raises(ConfigError, match="limit"):
        attnsim.simulate({"limit": True, "train": "nu"})


def test_p_training_with_identity_W_converges_in_direction_to_the_att_svm():
    """The acceptance run: train p, W = I, d = 200, lr = 0.05, flow to 1e12 steps."""
    r = attnsim.simulate({"train": "p", "init_W": "identity", "d": 200, "lr": 0.05, "integrator": "flow",
                          "steps": 10**12, "log_scale": "log", "log_points": 60, "limit": True})  # fmt: skip
    L, tr = r.limit, r.trajectory
    assert L["feasible"] and L["variable"] == "p" and L["kkt"] < 1e-10
    assert L["cos"] >= 0.99 and L["cos"] == tr["mm_cos"][-1]
    late = tr["mm_cos"][tr["step"] >= 10**6]
    assert np.all(np.diff(late) > 0)  # still rising over the last decades
    assert L["selection"] == tr["selected"][-1].tolist()
    assert 0 <= L["relevant_prob"] <= 1 and L["gen_never"] == (L["relevant_prob"] < 0.5)


def test_limit_section_for_W_and_p_and_its_hard_limit():
    r = attnsim.simulate({"signal_norm": 6.0, "integrator": "flow", "steps": 10**9, "log_scale": "log",
                          "log_points": 30, "limit": True})  # fmt: skip
    L = r.limit
    assert L["variable"] == "q" and L["feasible"] and 0.8 < L["cos"] < 1
    assert L["gen_never"] and L["relevant_prob"] < 0.5  # |mu| = 6 never generalizes
    assert r.theory["gen_never"] is True and r.final["t_select"] is None
    saved = r.to_json()
    assert saved["limit"]["relevant_prob"] == L["relevant_prob"]


@pytest.mark.slow
@pytest.mark.parametrize("integrator", ["flow", "gd"])
def test_refined_times_do_not_depend_on_the_log_grid(integrator):
    cfg = {"signal_norm": 10.0, "integrator": integrator, "log_scale": "log", "limit": True,
           "steps": 10**9 if integrator == "flow" else 30_000}  # fmt: skip
    a = attnsim.simulate({**cfg, "log_points": 40, "pop_log_points": 40}).final
    b = attnsim.simulate({**cfg, "log_points": 400, "pop_log_points": 400}).final
    for key in ("t_memorize", "t_select", "t_pop_loss_settled"):
        assert a[key] == pytest.approx(b[key], rel=1e-2 if integrator == "flow" else 0), key
    assert a["times_refined"] and b["times_refined"]


def _two_sample_toy():
    """Two samples of two tokens in R^2: sample 0 selects (1, 0) over 0, sample 1
    (0, 2) over 0; the att-SVM is q1 >= 1, 2 q2 >= 1: q_mm = (1, 1/2)."""
    X = np.array([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 2.0]]])
    return X, np.array([0, 1])


def test_w_svm_is_the_q_svm_scaled_by_p_in_closed_form():
    X, alpha = _two_sample_toy()
    p = np.array([3.0, 4.0])  # |p| = 5
    sol = w_svm(X, alpha, p)
    np.testing.assert_allclose(sol.extra["q_mm"], [1.0, 0.5], rtol=1e-12)
    np.testing.assert_allclose(sol.v, np.outer([1.0, 0.5], p) / 25.0, rtol=1e-12)
    assert np.linalg.norm(sol.v) == pytest.approx(np.sqrt(1.25) / 5.0, rel=1e-12)
    assert sol.kkt < 1e-12 and sol.support == 2
    # the same program solved as it stands, in vec(W): one constraint row (x_sel - x_t) kron p each,
    # posed as a sample whose selected token is that row and whose other token is 0
    G = np.array([np.kron(a, p) for a in constraint_rows(X, alpha)])
    direct = att_svm(np.stack([G, np.zeros_like(G)], axis=1), np.zeros(len(G), dtype=int))
    np.testing.assert_allclose(direct.v.reshape(2, 2), sol.v, rtol=1e-9, atol=1e-12)
    assert not w_svm(X, alpha, np.zeros(2)).feasible


def test_local_optimality_certificate_checks_every_support_token():
    X, alpha = _two_sample_toy()
    sol = att_svm(X, alpha)
    nu = np.array([1.0, 1.0])  # scores gamma = y nu . x: (1, 0) and (0, 2) for y = +1
    ok = local_optimality(X, alpha, np.array([1.0, 1.0]), nu, sol.dual)
    assert ok == {"locally_optimal": True, "support_checked": 2, "violations": [], "n_violations": 0}
    bad = local_optimality(X, alpha, np.array([1.0, -1.0]), nu, sol.dual)  # sample 1 now prefers token 0
    assert not bad["locally_optimal"] and bad["violations"] == [[1, 0, -2.0]]


def test_w_alone_reports_the_w_svm_and_the_certificate():
    r = attnsim.simulate({"train": "W", "init_p": "gaussian", "d": 300, "steps": 20000, "log_every": 1000,
                          "lr": 0.5, "limit": True})  # fmt: skip
    L = r.limit
    assert L["variable"] == "W" and L["feasible"]
    p = r.state["p"]
    assert L["W_norm"] == pytest.approx(L["norm"] / np.linalg.norm(p), rel=1e-10)
    cert = L["certificate"]
    assert cert["kkt"] < 1e-9 and cert["support_checked"] == L["support"]
    assert isinstance(cert["locally_optimal"], bool) and cert["n_violations"] == len(cert["violations"])
    assert np.all(np.diff(r.trajectory["mm_cos"][1:]) > -1e-9)  # W - W(0) turning towards W_mm
