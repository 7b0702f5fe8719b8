"""Exact population metrics against closed forms and large fresh samples."""

import numpy as np
import pytest
from scipy.special import ndtr

from attnsim.models.attention.population import (
    Population,
    expected_softplus,
    population_points,
    uniform_error,
)
from attnsim.models.attention.population.sobol import sobol_normals

ROLES = np.array([0, 1, 2, 3, 3, 3, 3, 3])


def _pop(points=4096, seed=0, rho=0.1, sigma=1.0, roles=ROLES):
    return Population(roles, rho, sigma, population_points(roles.size, points, np.random.default_rng(seed)))


def _scalars(q, nu, mu_pos, mu_neg):
    return q @ mu_pos, q @ mu_neg, q @ nu, q @ q, nu @ mu_pos, nu @ mu_neg, nu @ nu


@pytest.mark.parametrize("norm", [5.0, 10.0, 20.0])
def test_population_closed_form_at_q_zero(norm):
    d = 6
    mu_p, mu_n = np.eye(d)[0] * norm, np.eye(d)[1] * norm
    nu = (mu_p - mu_n) / np.linalg.norm(mu_p - mu_n) / norm
    out = _pop().evaluate(*_scalars(np.zeros(d), nu, mu_p, mu_n))
    assert out["pop_error"] == pytest.approx(ndtr(-norm / np.sqrt(16)), rel=1e-12)
    assert out["pop_error"] == pytest.approx(uniform_error(norm, 1.0, 8), rel=1e-12)
    assert out["pop_error_se"] == 0.0
    assert out["pop_score_relevant"] == pytest.approx(1 / 8)
    assert out["pop_score_irrelevant"] == pytest.approx(5 / 8)


def test_population_spec_values_at_init():
    assert uniform_error(20, 1, 8) == pytest.approx(2.9e-7, rel=0.02)
    assert uniform_error(10, 1, 8) == pytest.approx(6.2e-3, rel=0.02)
    assert uniform_error(5, 1, 8) == pytest.approx(0.106, rel=0.01)


def _fresh(q, nu, mu_p, mu_n, rho, sigma, m, rng, roles=ROLES):
    """Monte Carlo over fresh clean samples: errors, losses and scores."""
    d, T = q.size, roles.size
    y = np.where(rng.random(m) < 0.5, 1.0, -1.0)
    own = np.where(y[:, None] > 0, mu_p, mu_n)
    other = np.where(y[:, None] > 0, mu_n, mu_p)
    c_own = np.select([roles == 0, roles == 1], [1.0, rho], 0.0)
    c_oth = np.where(roles == 2, rho, 0.0)
    X = sigma * rng.standard_normal((m, T, d))
    X += c_own[None, :, None] * own[:, None, :] + c_oth[None, :, None] * other[:, None, :]
    z = X @ q
    s = np.exp(z - z.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    f = (s * (X @ nu)).sum(axis=1)
    return (y * f < 0).astype(float), np.logaddexp(0, -y * f), s


@pytest.mark.slow
def test_population_matches_fresh_samples_within_four_standard_errors():
    rng = np.random.default_rng(7)
    d, norm, rho, sigma = 12, 5.0, 0.1, 1.0
    mu_p, mu_n = np.eye(d)[0] * norm, np.eye(d)[1] * norm
    q = 0.08 * (mu_p + mu_n) + 0.3 * rng.standard_normal(d)
    nu = (mu_p - mu_n) / np.linalg.norm(mu_p - mu_n) / norm + 0.05 * rng.standard_normal(d)
    out = _pop(rho=rho, sigma=sigma).evaluate(*_scalars(q, nu, mu_p, mu_n))
    assert 0.03 < out["pop_error"] < 0.2  # a setting where the error is large
    errs, losses, scores = [], [], []
    for _ in range(10):
        e, lo, s = _fresh(q, nu, mu_p, mu_n, rho, sigma, 20_000, rng)
        errs.append(e)
        losses.append(lo)
        scores.append(s)
    e, lo, s = np.concatenate(errs), np.concatenate(losses), np.concatenate(scores)
    se = np.hypot(e.std() / np.sqrt(e.size), out["pop_error_se"])
    assert abs(out["pop_error"] - e.mean()) < 4 * se
    assert abs(out["pop_loss"] - lo.mean()) < 4 * lo.std() / np.sqrt(lo.size) + 1e-4
    rel = s[:, 0]
    assert abs(out["pop_score_relevant"] - rel.mean()) < 4 * rel.std() / np.sqrt(rel.size) + 1e-4


def test_population_error_se_is_small_and_positive():
    d, norm = 6, 5.0
    mu_p, mu_n = np.eye(d)[0] * norm, np.eye(d)[1] * norm
    nu = (mu_p - mu_n) / np.linalg.norm(mu_p - mu_n) / norm
    q = np.array([0.3, 0.3, 0.2, 0.0, 0.1, 0.0])
    out = _pop().evaluate(*_scalars(q, nu, mu_p, mu_n))
    assert 0 < out["pop_error_se"] < 0.05 * out["pop_error"]
    # the same points every time: deterministic
    assert _pop().evaluate(*_scalars(q, nu, mu_p, mu_n)) == out


def test_population_degenerate_sd_zero():
    # nu parallel to q: f is a deterministic function of z, the sd -> 0 branch
    d, norm = 4, 5.0
    mu_p, mu_n = np.eye(d)[0] * norm, np.eye(d)[1] * norm
    q = np.array([1.0, -1.0, 0.0, 0.0])
    nu = 0.1 * q
    out = _pop().evaluate(*_scalars(q, nu, mu_p, mu_n))
    e, _, _ = _fresh(q, nu, mu_p, mu_n, 0.1, 1.0, 100_000, np.random.default_rng(1))
    assert abs(out["pop_error"] - e.mean()) < 4 * np.hypot(e.std() / np.sqrt(e.size), out["pop_error_se"])


def _expected_softplus_reference(x, sd):
    """E softplus(x + sd Z) by adaptive quadrature, split at the kink of max(v, 0)."""
    from scipy import integrate

    def f(v):
        return np.logaddexp(0.0, v) * np.exp(-0.5 * ((v - x) / sd) ** 2) / (sd * np.sqrt(2 * np.pi))

    lo, hi = x - 40 * sd, x + 40 * sd
    cuts = sorted({lo, hi, x, min(max(0.0, lo), hi)})
    return sum(
        integrate.quad(f, a, b, epsabs=0, epsrel=2e-14, limit=500)[0] for a, b in zip(cuts, cuts[1:]) if b > a
    )


@pytest.mark.parametrize(
    "sd", [0.01, 0.1, 0.15, 0.151, 0.3, 0.31, 0.5, 0.7, 0.71, 1.0, 3.0, 5.0, 10.0, 30.0, 100.0]
)
def test_expected_softplus_is_accurate_for_any_sd(sd):
    xs = np.concatenate([np.linspace(-30, 30, 61), [-300.0, 300.0, 1e-3]])
    got = expected_softplus(xs, np.full(xs.size, sd))
    worst = max(abs(g / _expected_softplus_reference(x, sd) - 1) for x, g in zip(xs, got))
    assert worst <= 1e-9, worst


def test_expected_softplus_mixes_rules_within_one_call():
    """Points of every rule in one array: each gets its rule's accuracy (the
    Gauss-Hermite points share the nodes of the largest of their sds)."""
    rng = np.random.default_rng(3)
    sds = np.array([0.05, 0.16, 0.22, 0.45, 0.69, 0.9, 4.0])
    xs = rng.uniform(-8, 8, sds.size)
    got = expected_softplus(np.repeat(xs, 2), np.repeat(sds, 2))
    want = np.repeat([_expected_softplus_reference(x, s) for x, s in zip(xs, sds)], 2)
    np.testing.assert_allclose(got, want, rtol=1e-9)


def test_softplus_from_the_arithmetic_log1p_is_exact_to_a_few_ulp():
    """The Taylor kernel at sd = 0 is softplus itself, computed with the
    arithmetic-only log1p: within 4 ulp of NumPy's over 600 orders of magnitude."""
    from attnsim.models.attention.population import pop_kernels

    xs = np.concatenate([np.linspace(-700, 700, 20001), [0.0, -1e-300, 1e-300]])
    got, want = pop_kernels.taylor(xs, np.zeros(xs.size)), np.logaddexp(0.0, xs)
    assert np.max(np.abs(got / want - 1)) <= 4 * np.finfo(float).eps


def test_normal_tail_matches_scipy_to_its_own_rounding():
    """Phi(-t) by Cody's rationals: relative error within a few t^2 eps of
    scipy.special.ndtr (both lose t^2 eps to the rounding of t), exact 0 and 1
    beyond |t| = 40, and Phi(0) = 1/2."""
    from scipy.special import ndtr

    from attnsim.models.attention.population import pop_kernels

    t = np.concatenate([np.linspace(-39.99, 39.99, 400001), [0.0, 0.66291, 5.65686, -5.65686]])
    got, want = pop_kernels.upper_tail(t), ndtr(-t)
    pos = want > 1e-300
    rel = np.abs(got[pos] / want[pos] - 1) / np.maximum(1.0, t[pos] ** 2)
    assert rel.max() <= 8 * np.finfo(float).eps, rel.max()
    assert np.all(got[~pos] < 1e-300)
    special = np.array([-40.0, 40.0, -np.inf, np.inf, np.nan, 0.0])
    np.testing.assert_array_equal(pop_kernels.upper_tail(special),
                                  [1.0, 0.0, 1.0, 0.0, 0.0, 0.5])  # fmt: skip


@pytest.mark.parametrize("T, n_zero", [(6, 0), (8, 5), (13, 9), (4, 4), (3, 1)])
def test_conditional_moments_kernel_equals_the_direct_softmax(T, n_zero):
    """The kernel's factored softmax sums against each point's softmax written
    out in NumPy: 1 / normalizer, y times the mean of f, its sd and t; with
    ``n_zero`` trailing tokens of mean zero (irrelevant tokens: summed once for both classes)."""
    from attnsim.models.attention.population import moment_kernels

    rng = np.random.default_rng(4)
    N, sq, b, sdc = 64, 1.7, 0.3, 0.8
    from attnsim.runtime.workspace import PROCESS

    PROCESS.work.moments = np.full(3 * N, np.nan)  # whatever this thread's work array held must not leak in
    zeta = rng.standard_normal((T, N))
    aq, anu = rng.normal(0, 2, (2, T)), rng.standard_normal((2, T))
    aq[:, T - n_zero :] = anu[:, T - n_zero :] = 0.0
    E = np.exp(sq * (zeta - zeta.max(axis=0)))
    wa = np.exp(aq - aq.max(axis=1, keepdims=True))
    inv, ym, sd, t, bad = moment_kernels.conditional_moments(E, zeta, wa, anu, b, sdc, 1e-140)
    assert bad == 0
    for c in range(2):
        z = aq[c][:, None] + sq * zeta  # (T, N) logits of class c
        s = np.exp(z - z.max(axis=0))
        s /= s.sum(axis=0)
        mean = (s * (anu[c][:, None] + b * zeta)).sum(axis=0)
        np.testing.assert_allclose(ym[c], (1 - 2 * c) * mean, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(sd[c], sdc * np.sqrt((s * s).sum(axis=0)), rtol=1e-12)
        np.testing.assert_allclose(t[c], ym[c] / sd[c], rtol=1e-15)
        np.testing.assert_allclose(inv[c] * (wa[c] @ E), 1.0, rtol=1e-15)


def test_expected_softplus_at_sd_zero_is_softplus():
    xs = np.array([-700.0, -3.0, 0.0, 2.0, 700.0])
    np.testing.assert_allclose(expected_softplus(xs, np.zeros(5)), np.logaddexp(0, xs), rtol=1e-15)


def test_sobol_points_equal_scipy_unscrambled():
    from scipy.stats import qmc

    from attnsim.models.attention.population.sobol import SOBOL_BITS, sobol_direction_numbers, sobol_integers

    for dim, m in ((1, 9), (8, 9), (40, 12), (21201, 6)):  # the shipped table's every dimension
        ours = sobol_integers(sobol_direction_numbers(dim), m) * 2.0**-SOBOL_BITS
        ref = qmc.Sobol(d=dim, scramble=False, bits=SOBOL_BITS).random_base2(m)
        np.testing.assert_array_equal(ours, ref)


def test_scrambled_sobol_points_stay_a_net_and_are_uniform():
    """Every 2^m points of a (t, m, s)-net in base 2 put exactly 2^(m-t) points in
    each elementary interval: in particular every coordinate is stratified into
    2^m equal cells with one point each, and pairs of coordinates into 2^a x 2^b
    cells (a + b <= m - t, t small for the leading coordinates)."""
    from attnsim.models.attention.population.sobol import SOBOL_BITS, sobol_direction_numbers, sobol_integers

    rng = np.random.default_rng(5)
    v = sobol_direction_numbers(8)
    m = 10
    means = []
    for _ in range(20):
        u = (sobol_integers(v, m, rng) + 0.5) * 2.0**-SOBOL_BITS
        for j in range(8):
            assert np.all(np.bincount((u[:, j] * 2**m).astype(int), minlength=2**m) == 1)
        cells = (u[:, 0] * 2**5).astype(int) * 32 + (u[:, 1] * 2**5).astype(int)
        assert np.all(np.bincount(cells, minlength=1024) == 1)  # coordinates 1, 2 form a (0, 2)-sequence
        means.append(u.mean(axis=0))
    # random scrambles: each point is uniform, so the scramble means scatter around 1/2
    assert abs(np.mean(means) - 0.5) < 1e-3 and np.std(means) > 0


def _scrambled_sobol_by_definition(v, m, rng):
    """The scrambled points bit by bit: draw L (strictly lower bits, unit
    diagonal) and the shift; bit p of scrambled v[j, q] is the parity of
    row p of L_j and v[j, q]; point i XORs v[:, b] over the bits b of its Gray code."""
    dim, bits = v.shape
    L = np.tril(rng.integers(0, 2, size=(dim, bits, bits), dtype=np.int64), -1) + np.eye(bits, dtype=np.int64)
    shift = rng.integers(0, 1 << bits, size=dim, dtype=np.int64)
    vs = np.zeros_like(v)
    for j in range(dim):
        for q in range(bits):
            for p in range(bits):
                par = sum(int(L[j, p, c]) * ((int(v[j, q]) >> (bits - 1 - c)) & 1) for c in range(bits)) % 2
                vs[j, q] |= par << (bits - 1 - p)
    x = np.empty((1 << m, dim), dtype=np.int64)
    for i in range(1 << m):
        gray, acc = i ^ (i >> 1), shift.copy()
        for b in range(m):
            if (gray >> b) & 1:
                acc ^= vs[:, b]
        x[i] = acc
    return x


def test_scrambled_sobol_points_equal_their_definition():
    """The matrix-product scramble and the doubling Gray-code walk give the
    same integers as the bitwise definition, and sobol_normals (all scrambles
    at once) the same numbers as one scramble at a time, leaving the stream
    in the same state."""
    from scipy.special import ndtri

    from attnsim.models.attention.population.sobol import (
        N_SCRAMBLES,
        SOBOL_BITS,
        sobol_direction_numbers,
        sobol_integers,
    )

    for dim, m, seed in ((1, 0, 0), (3, 4, 1), (8, 6, 2)):
        v = sobol_direction_numbers(dim)
        ours = sobol_integers(v, m, np.random.default_rng(seed))
        np.testing.assert_array_equal(ours, _scrambled_sobol_by_definition(v, m, np.random.default_rng(seed)))
    v = sobol_direction_numbers(8)
    r1, r2 = np.random.default_rng(7), np.random.default_rng(7)
    zeta = sobol_normals(8, 256, r1)
    one_by_one = [ndtri((sobol_integers(v, 5, r2) + 0.5) * 2.0**-SOBOL_BITS) for _ in range(N_SCRAMBLES)]
    np.testing.assert_array_equal(zeta, np.stack(one_by_one))
    assert r1.integers(1 << 40) == r2.integers(1 << 40)


def test_population_underflow_fallback_matches_direct_softmax():
    """Huge mean logits and noise scale: the factored softmax weights underflow
    for some points and those are recomputed directly (the scores of the
    quasi-random points against each point's softmax written out)."""
    pop = _pop(points=256)
    args = (3000.0, -2900.0, 0.02, 400.0**2, 0.7, -0.7, 0.05)  # q.mu+ = 3000 with |q| = 400
    out = pop.evaluate(*args)
    aq, _ = pop.class_means(args[0], args[1], args[4], args[5])
    qn = 400.0
    score = 0.0
    for c in range(2):
        z = aq[c][:, None] + qn * pop.zeta
        s = np.exp(z - z.max(axis=0))
        s /= s.sum(axis=0)
        score += 0.5 * s[0].mean()
    assert out["pop_score_relevant"] == pytest.approx(score, rel=1e-12, abs=1e-300)


def test_bulk_metrics_are_the_mean_over_independent_scrambles():
    """The loss and the scores of the quasi-random points are the means of the
    per-scramble estimates: evaluate each scramble alone and compare."""
    rng = np.random.default_rng(2)
    zeta, *tail = population_points(8, 2048, rng)
    d, norm = 6, 5.0
    mu_p, mu_n = np.eye(d)[0] * norm, np.eye(d)[1] * norm
    nu = (mu_p - mu_n) / np.linalg.norm(mu_p - mu_n) / norm + 0.03 * rng.standard_normal(d)
    q = np.array([0.3, 0.25, 0.4, -0.3, 0.2, 0.1])
    for scale in (1.0, 6.0, 20.0):  # conditional sd from the Taylor range to the series
        args = _scalars(q, scale * nu, mu_p, mu_n)
        whole = Population(ROLES, 0.1, 1.0, (zeta, *tail)).evaluate(*args)
        parts = [
            Population(ROLES, 0.1, 1.0, (np.repeat(zeta[r : r + 1], 2, axis=0), *tail)).evaluate(*args)
            for r in range(8)
        ]
        assert whole["pop_loss"] == pytest.approx(np.mean([p["pop_loss"] for p in parts]), rel=1e-12)
        assert whole["pop_score_relevant"] == pytest.approx(
            np.mean([p["pop_score_relevant"] for p in parts]), rel=1e-12
        )
        assert all(p["pop_error"] == whole["pop_error"] for p in parts)  # the error has its own points


@pytest.mark.parametrize("nunu", [np.nan, np.inf])
def test_a_state_that_overflowed_gives_a_non_finite_loss(nunu):
    """The driver reports divergence from a non-finite population loss: a NaN
    or infinite |nu|^2 must not come back as a finite number (whichever rule
    the points' conditional sd would pick)."""
    rng = np.random.default_rng(0)
    pop = Population(np.repeat(np.arange(4), (1, 1, 1, 5)), 0.1, 1.0, population_points(8, 256, rng))
    assert not np.isfinite(pop.evaluate(1.0, 0.5, 0.1, 2.0, 0.7, -0.7, nunu)["pop_loss"])


def test_population_with_points_drawn_at_first_evaluation():
    """A Population given a function for its points calls it once, at its first
    evaluation, and then evaluates exactly as one given the points."""
    roles = np.repeat(np.arange(4), (1, 1, 1, 5))
    calls = []

    def draw():
        calls.append(1)
        return population_points(8, 256, np.random.default_rng(3))

    lazy = Population(roles, 0.1, 1.0, draw)
    eager = Population(roles, 0.1, 1.0, population_points(8, 256, np.random.default_rng(3)))
    assert calls == []
    args = (2.0, -1.0, 0.5, 9.0, 1.5, -0.5, 2.0)
    assert lazy.evaluate(*args) == eager.evaluate(*args)
    assert lazy.hard_limit(*args) == eager.hard_limit(*args)
    assert calls == [1]


def test_the_design_kernels_copy_of_erfcx_is_the_moment_kernels_own():
    """design_kernels keeps its own _erfcx (Numba's cache rule: a kernel and what it
    calls in one file); the copy must compute the same numbers bit for bit."""
    from attnsim.models.attention.population import design_kernels, moment_kernels

    xs = np.concatenate([np.linspace(0.0, 30.0, 3001), np.geomspace(1e-8, 1e8, 500)])
    for a in xs:
        assert design_kernels._erfcx(a) == moment_kernels._erfcx(a), a


@pytest.mark.parametrize("attention", ["softmax", "stablemax"])
def test_an_evaluation_gives_the_same_bits_whatever_was_evaluated_before(attention):
    """An evaluation depends on its state's scalars and the points alone: the numbers must not
    depend on what the reused work arrays held (the states evaluated again, in the other order)."""
    roles = np.repeat(np.arange(4), (1, 1, 1, 5))
    calls = []

    def draw():
        calls.append(1)
        return population_points(8, 512, np.random.default_rng(5))

    pop = Population(roles, 0.1, 1.0, draw, attention=attention)
    rng = np.random.default_rng(0)
    states = [
        tuple(rng.normal(0.0, s, 7) * [1, 1, 1, 0, 1, 1, 0] + [0, 0, 0, s * s, 0, 0, 1.0])
        for s in (0.5, 3, 9)
    ]
    states.append((0.0, 0.0, 0.0, 0.0, 1.0, -1.0, 2.0))  # q = 0: uniform attention
    first = [pop.evaluate(*a) for a in states]
    assert calls == [1]  # the points drawn once, at the first evaluation
    for a, want in zip(reversed(states), reversed(first)):  # the other order, on the same arrays
        got = pop.evaluate(*a)
        assert got.keys() == want.keys()
        for k in want:
            assert got[k] == want[k] or (np.isnan(got[k]) and np.isnan(want[k])), k


def test_pop_seed_redraws_the_population_estimate_and_nothing_else(small_cfg):
    """pop_seed (unset: the points follow seed) changes the population metrics and what is made
    of them, and no other number of the record: the trajectory of the training state, the test
    set and the config but for pop_seed itself."""
    import math

    import attnsim

    a = attnsim.simulate(small_cfg)
    b = attnsim.simulate({**small_cfg, "pop_seed": 3})
    again = attnsim.simulate({**small_cfg, "pop_seed": 3})

    def same(x, y):
        return x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))

    derived = {"excess_error", "excess_error_se", "error_clean_twin", "error_clean_twin_se"}
    derived |= {"label_noise_cost", "label_noise_cost_se"}
    moved = {k for k in a.final if not same(a.final[k], b.final[k])}
    assert "pop_error" in moved and moved <= {k for k in a.final if k.startswith("pop_")} | derived
    assert all(same(b.final[k], again.final[k]) for k in b.final)  # reproducible
    assert {k for k in a.config if a.config[k] != b.config[k]} == {"pop_seed"}
    for k, v in a.trajectory.items():
        if not k.startswith(("pop_", "excess", "error_clean", "label_noise")):
            assert np.array_equal(np.asarray(v), np.asarray(b.trajectory[k]), equal_nan=True), k
