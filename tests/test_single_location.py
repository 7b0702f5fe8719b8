"""Single-location regression (Marion et al., ICLR 2025; SPEC §20): the kernels against the NumPy
reference, the closed-form risk against Monte Carlo, the five-overlap PGD against PGD in d
dimensions, a run's risk against the closed form of its own overlaps, its test risk against its
risk, and what the model refuses."""

import math

import numpy as np
import pytest
from scipy.special import erf, owens_t

import attnsim
from attnsim.config import Config, ConfigError
from attnsim.models.single_location import kernels as K
from attnsim.models.single_location import reference as R

GAMMA = math.sqrt(0.5)


def _state(rng, dim=6):
    """Random unit k, v and orthonormal k*, v* (in ``dim`` coordinates: only their span matters)."""
    Q = np.linalg.qr(rng.standard_normal((dim, dim)))[0]
    k, v = rng.standard_normal(dim), rng.standard_normal(dim)
    return k / np.linalg.norm(k), v / np.linalg.norm(v), Q[:, 0], Q[:, 1]


def test_owens_t_kernel_matches_scipy_everywhere_the_runs_reach():
    hs = np.concatenate([np.linspace(-40.0, 40.0, 401), [0.0, 1e-9, 1e-4]])
    for a in (1e-5, 0.01, 0.2, 0.5, 0.8, 1.0):
        worst = max(abs(K.owens_t(h, a) - owens_t(h, a)) for h in hs)
        assert worst < 3e-16, (a, worst)


def test_zeta_is_the_mean_squared_erf_and_its_derivative_is_the_published_one():
    """zeta(t, s) = E[erf(t + s g)^2]: against Gauss-Hermite quadrature, and zeta' against
    central differences of it (zeta' is the authors' der_zeta)."""
    x, w = np.polynomial.hermite_e.hermegauss(200)
    w = w / w.sum()
    for t, s in ((0.0, 0.3), (1.2, 0.7), (-2.0, 0.1), (5.0, 2.0), (0.3, 0.05)):
        assert abs(R.zeta(t, s) - float(w @ erf(t + s * x) ** 2)) < 1e-13
        assert abs(K.zeta(t, s) - R.zeta(t, s)) < 3e-16
        h = 1e-5
        fd = (R.zeta(t + h, s) - R.zeta(t - h, s)) / (2 * h)
        assert abs(R.zeta_derivatives(t, s)[0] - fd) < 1e-9


def test_risk_kernel_matches_the_reference_and_its_partials_central_differences():
    rng = np.random.default_rng(0)
    for _ in range(12):
        k, v, ks, vs = _state(rng)
        o = R.overlaps(k, v, ks, vs)
        args = (rng.uniform(0.05, 2.0), rng.uniform(0.2, 1.5), float(rng.choice([20, 400, 5000])), 10, 0.3)
        r, P = K.risk_and_partials(o, *args)
        assert abs(r - R.risk(o, *args)) <= 1e-13 * abs(r)
        ref = R.risk_partials(o, *args)
        np.testing.assert_allclose(P, ref, rtol=1e-12, atol=1e-13 * np.abs(ref).max())
        fd = np.empty(5)
        for j in range(5):
            h = 1e-6
            up, down = o.copy(), o.copy()
            up[j] += h
            down[j] -= h
            fd[j] = (R.risk(up, *args) - R.risk(down, *args)) / (2 * h)
        assert np.abs(fd - ref).max() < 1e-8 * max(1.0, np.abs(ref).max())


def _monte_carlo(o, lam, gamma, d, L, eps, n, rng):
    """E[(T - y)^2] by sampling the tokens' coordinates along k, v, k*, v*: the joint Gaussian of
    (x_1.k, x_1.v, x_1.v*) and of (x_l.k, x_l.v), drawn in chunks; mean and standard error. The
    label noise, independent of the tokens, is averaged exactly (E[(A - eps g)^2] = A^2 + eps^2):
    one draw fewer per sample and a smaller variance."""
    kappa, nu, theta, eta, rho = o
    C1 = np.linalg.cholesky(np.array([[1, rho, eta], [rho, 1, nu], [eta, nu, 1]]) + 1e-15 * np.eye(3))
    C2 = np.linalg.cholesky(np.array([[1, rho], [rho, 1]]) + 1e-15 * np.eye(2))
    h, total, total2, done = math.sqrt(d / 2), 0.0, 0.0, 0
    while done < n:
        m = min(1_000_000, n - done)
        z = rng.standard_normal((m, 3)) @ C1.T
        zl = rng.standard_normal((m, L - 1, 2)) @ C2.T
        T = erf(lam * (h * kappa + gamma * z[:, 0])) * (h * theta + gamma * z[:, 1])
        T += (erf(lam * zl[..., 0]) * zl[..., 1]).sum(axis=1)
        e = (T - gamma * z[:, 2]) ** 2 + eps**2
        total, total2, done = total + e.sum(), total2 + (e**2).sum(), done + m
    mean = total / n
    return mean, math.sqrt((total2 / n - mean**2) / n)


@pytest.mark.slow
def test_closed_form_risk_matches_monte_carlo_at_eight_random_states():
    """The derivation (reference's note) against 3 10^6 samples per state (standard errors
    0.02-0.09 % of the risk; a 0.5 % error in the risk is more than 5 of them): z within +-3."""
    rng, draws = np.random.default_rng(1), np.random.default_rng(2)
    zs, rel = [], []
    for i in range(8):
        k, v, ks, vs = _state(rng)
        if i == 0:
            k, v = ks, vs  # the teacher itself
        o = R.overlaps(k, v, ks, vs)
        lam, gamma, d, L, eps = (
            rng.uniform(0.05, 1.5),
            rng.uniform(0.3, 1.2),
            float(rng.choice([40, 400])),
            5,
            0.2,
        )
        mc, se = _monte_carlo(o, lam, gamma, d, L, eps, 3 * 10**6, draws)
        zs.append((mc - R.risk(o, lam, gamma, d, L, eps)) / se)
        rel.append(se / mc)
    print("z", np.round(zs, 2), "relative standard errors", np.round(rel, 5))
    assert np.all(np.abs(zs) < 3), zs


def test_five_overlap_pgd_equals_pgd_in_d_dimensions():
    """The population PGD in coefficients of (k(0), v(0), k*, v*) (the stepper's kernel), the
    same PGD in the five overlaps alone (the reference) and PGD with the gradient formed in d
    dimensions agree to 1e-12 over 300 steps, from the sphere and from the manifold."""
    d, L, lam, lr = 60, 6, 0.3, 0.02
    for init in ("sphere", "manifold"):
        rng = np.random.default_rng(7)
        ks, vs = R.teacher_directions(d, rng)
        k, v = R.initial_kv(init, ks, vs, rng)
        E = np.stack([k, v, ks, vs])
        c = np.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0]])
        K.pgd_coefficients(c, E @ E.T, 0, 300, lr, lam, False, GAMMA, d, L)
        o = R.overlaps(k, v, ks, vs)
        for _ in range(300):
            P = R.risk_partials(R.overlaps(k, v, ks, vs), lam, GAMMA, d, L, 0.0)
            gk = P[0] * ks + P[3] * vs + P[4] * v
            gv = P[2] * ks + P[1] * vs + P[4] * k
            k, v = R.riemannian_step(k, v, gk, gv, lr)
            o = R.pgd_overlaps(o, R.risk_partials(o, lam, GAMMA, d, L, 0.0), lr)
        dense = R.overlaps(k, v, ks, vs)
        np.testing.assert_allclose(K.coefficient_overlaps(c, E @ E.T), dense, atol=1e-12)
        np.testing.assert_allclose(o, dense, atol=1e-12)
        np.testing.assert_allclose(c[0] @ E, k, atol=1e-12)


def test_sample_kernel_matches_the_reference_for_each_attention():
    rng = np.random.default_rng(3)
    ks, vs = R.teacher_directions(20, rng)
    X, y = R.draw(30, 5, ks, vs, 0.7, 0.2, rng)
    k, v = _state(rng, 20)[:2]
    work = K.SampleWork(5, 20)
    for name, code in K.ATTENTIONS.items():
        loss, gk, gv = work.loss_grad(X, y, k, v, 0.6, code)
        rk, rv = R.grad(X, y, k, v, 0.6, name)
        assert abs(loss - R.loss(X, y, k, v, 0.6, name)) < 1e-13 * loss
        np.testing.assert_allclose(gk, rk, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(gv, rv, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("keys", [{}, {"init": "sphere", "scale_schedule": True, "attention_scale": 0.9}])
def test_a_runs_risk_is_the_closed_form_of_its_own_overlaps(keys):
    """Acceptance: result.json's risk equals the closed form (SciPy's owens_t, the reference)
    evaluated at the run's final overlaps, to 1e-8 relative."""
    res = attnsim.simulate({"model": "single_location", "steps": 3000, "log_every": 1000, **keys})
    f, c = res.final, res.config
    o = np.array([f["k_kstar"], f["v_vstar"], f["v_kstar"], f["vstar_k"], f["k_v"]])
    lam = c["attention_scale"] / (1 + 1e-4 * 3000) if c["scale_schedule"] else c["attention_scale"]
    want = R.risk(o, lam, c["gamma"], c["d"], c["T"], c["label_sd"])
    assert abs(f["risk"] - want) <= 1e-8 * want and f["risk_se"] == 0.0
    k, v = res.state["k"], res.state["v"]
    assert abs(np.linalg.norm(k) - 1) < 1e-12 and abs(np.linalg.norm(v) - 1) < 1e-12


@pytest.mark.parametrize(
    "keys",
    [
        {"integrator": "population", "d": 50, "T": 4, "steps": 500, "label_sd": 0.3},
        {"integrator": "gd", "d": 30, "T": 3, "n": 200, "steps": 100, "attention_scale": 0.5, "lr": 0.02},
        {"integrator": "online", "d": 30, "T": 3, "batch": 8, "steps": 200, "attention": "softmax",
         "lr": 0.01, "pop_points": 2**16},
        {"integrator": "gd", "d": 25, "T": 4, "n": 100, "steps": 50, "attention": "linear", "lr": 0.005,
         "pop_points": 2**16},
    ],
)  # fmt: skip
def test_test_risk_agrees_with_the_risk_within_four_standard_errors(keys):
    res = attnsim.simulate({"model": "single_location", "test_n": 40_000, "log_every": 50, **keys})
    f = res.final
    se = math.hypot(f["test_risk_se"], f["risk_se"])
    assert abs(f["test_risk"] - f["risk"]) < 4 * se, (f["test_risk"], f["risk"], se)


@pytest.mark.parametrize(
    "keys,word",
    [
        ({"integrator": "population", "attention": "softmax"}, "attention: softmax has no closed-form"),
        ({"integrator": "online"}, "batch: online SGD draws batch fresh samples"),
        ({"n": 50}, "n: model=single_location reads it under integrator=gd only, not population"),
        ({"signal_norm": 3.0}, "signal_norm: model=single_location does not read it"),
        ({"attention_scale": 0.0}, "attention_scale: must be a finite number > 0"),
        ({"init": "semantic"}, "init: model=single_location does not run initialization semantic"),
        ({"attention": "stablemax"}, "attention: model=single_location does not run attention stablemax"),
    ],
)
def test_what_the_model_refuses_is_refused_by_name(keys, word):
    with pytest.raises(ConfigError, match=word):
        Config(model="single_location", **keys)
