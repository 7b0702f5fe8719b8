"""The Bayes error of the data models (attnsim.data.bayes), against closed forms
and estimators that share nothing with it."""

import math

import numpy as np
import pytest
from naive import bayes_error_by_mean_shifts, bayes_error_by_monte_carlo, distinct_assignments
from scipy.special import ndtr

import attnsim
from attnsim.data import bayes


def _signals(norm):
    return np.array([norm, 0.0, 0.0]), np.array([0.0, norm, 0.0])


def test_known_positions_closed_form_at_the_documented_values():
    """Phi(-|mu| sqrt((1 + 2 rho^2) / 2) / sigma): 0.0766 at |mu| = 2, 1.8e-4 at 5 (SPEC §3)."""
    for norm, want in ((2.0, 0.0766), (5.0, 1.78e-4)):
        got = bayes.known_positions(*_signals(norm), 1.0, 0.1, (1, 1, 1, 5))
        assert got == pytest.approx(float(ndtr(-norm * math.sqrt(1.02 / 2))), rel=1e-14)
        assert got == pytest.approx(want, rel=3e-3)


@pytest.mark.parametrize("counts,rho,norm", [((1, 1, 1, 5), 0.1, 2.0), ((2, 0, 1, 3), 0.4, 1.5)])
def test_known_positions_equals_the_likelihood_ratio_test_by_monte_carlo(counts, rho, norm, rng):
    """The closed form against the error of the likelihood-ratio test itself on
    fresh samples (unequal signal norms and a non-orthogonal pair too)."""
    mu_pos, mu_neg = np.array([norm, 0.3, 0.0]), np.array([0.2, 1.1 * norm, 0.5])
    m_pos, m_neg = bayes.role_means(mu_pos, mu_neg, 1.3, rho)
    want, se = bayes_error_by_monte_carlo(m_pos, m_neg, counts, 200_000, rng, shuffled=False)
    assert bayes.known_positions(mu_pos, mu_neg, 1.3, rho, counts) == pytest.approx(want, abs=4 * se)


@pytest.mark.parametrize("counts", [(1, 1, 1, 3), (2, 1, 0, 3), (1, 0, 2, 2)])
def test_log_assignments_is_the_sum_over_every_distinct_assignment(counts, rng):
    A = distinct_assignments(counts)
    logw = rng.normal(size=(3, sum(counts), 4))
    brute = np.logaddexp.reduce(logw[:, np.arange(A.shape[1]), A].sum(axis=2), axis=1)
    np.testing.assert_allclose(bayes.log_assignments(logw, counts), brute, rtol=1e-13)


def test_sampled_assignments_follow_their_weights(rng):
    counts = (1, 1, 1, 2)
    A = distinct_assignments(counts)
    logw = rng.normal(size=(5, 4))
    p = np.exp(logw[np.arange(5), A].sum(axis=1))
    p /= p.sum()
    n = 200_000
    drawn = bayes.sample_assignments(logw, counts, n, rng)
    index = {tuple(a): i for i, a in enumerate(A.tolist())}
    seen = np.bincount([index[tuple(r)] for r in drawn.tolist()], minlength=len(A))
    chi2 = float(np.sum((seen - n * p) ** 2 / (n * p)))
    assert chi2 < len(A) + 5 * math.sqrt(2 * len(A)), chi2  # 59 degrees of freedom


@pytest.mark.parametrize("norm", [1.0, 2.0])
def test_shuffled_positions_against_plain_monte_carlo(norm, rng):
    """Moderate errors: the estimator against the enumerated likelihood-ratio
    classifier on fresh samples with random positions (the default roles)."""
    counts = (1, 1, 1, 5)
    mu = _signals(norm)
    got = bayes.shuffled_positions(*mu, 1.0, 0.1, counts)
    want, se = bayes_error_by_monte_carlo(*bayes.role_means(*mu, 1.0, 0.1), counts, 20_000, rng)
    assert got["bayes_error_resolved"] == 1.0
    assert got["bayes_error"] == pytest.approx(want, abs=4 * math.hypot(se, got["bayes_error_se"]))
    assert got["bayes_error"] > got["bayes_error_lower"]  # not knowing the positions costs


@pytest.mark.parametrize("norm", [6.0, 12.0])
def test_shuffled_positions_in_the_tail_against_an_independent_sampler(norm, rng):
    """Small errors (1e-6 .. 1e-18), where plain sampling sees nothing: against
    a mean-shift mixture over every enumerated assignment, and inside the
    bounds (the known-positions error below, the Bhattacharyya sum above)."""
    counts, rho = (1, 1, 1, 2), 0.3
    mu = _signals(norm)
    got = bayes.shuffled_positions(*mu, 1.0, rho, counts)
    want, se = bayes_error_by_mean_shifts(*bayes.role_means(*mu, 1.0, rho), counts, 100_000, rng)
    assert se < 0.05 * want and got["bayes_error_se"] < 0.05 * got["bayes_error"]
    assert got["bayes_error"] == pytest.approx(want, abs=4 * math.hypot(se, got["bayes_error_se"]))
    assert got["bayes_error_lower"] < got["bayes_error"] < math.exp(bayes._log_bound(*mu, 1.0, rho, counts))


def test_shuffled_positions_with_one_role_or_none_are_the_closed_form():
    mu = _signals(1.5)
    only = bayes.shuffled_positions(*mu, 1.0, 0.1, (4, 0, 0, 0))
    assert (
        only["bayes_error"] == bayes.known_positions(*mu, 1.0, 0.1, (4, 0, 0, 0))
        and only["bayes_error_se"] == 0
    )


def test_shuffled_positions_far_in_the_tail_are_a_bound():
    """Beyond float64 (|mu| = 60: the error near 1e-320) an upper bound, flagged."""
    got = bayes.shuffled_positions(*_signals(60.0), 1.0, 0.1, (1, 1, 1, 5))
    assert got["bayes_error_resolved"] == 0.0 and math.isnan(got["bayes_error_se"])
    assert got["bayes_error"] == bayes.FLOOR == 1e-300  # the bound: the estimate would be subnormal


def test_magen_data_model_is_never_wrong():
    r = bayes.bayes_error("magen2025", *_signals(3.0), 1.0, 0.0, (1, 0, 0, 1), True)
    assert r["bayes_error"] == 0.0 and r["bayes_error_se"] == 0.0 and "magen2025" in r["bayes_method"]


def test_every_run_reports_its_bayes_error_and_a_file_without_a_data_model_says_why(fixture_path):
    r = attnsim.simulate({"n": 6, "T": 4, "d": 30, "steps": 5, "pop_points": 64, "signal_norm": 3.0})
    assert r.final["bayes_error"] == pytest.approx(
        bayes.known_positions(*_signals(3.0), 1.0, 0.1, (1, 1, 1, 1))
    )
    assert "closed form" in r.data["bayes"]["bayes_method"]
    shuffled = attnsim.simulate(
        {"n": 6, "T": 4, "d": 30, "steps": 5, "pop_points": 64, "signal_norm": 3.0, "shuffle_roles": True}
    )
    assert (
        shuffled.final["bayes_error"] > r.final["bayes_error"]
        and "importance" in shuffled.data["bayes"]["bayes_method"]
    )
    f = attnsim.simulate({"steps": 5, "log_every": 5}, data=fixture_path)  # no roles: no data model
    assert math.isnan(f.final["bayes_error"]) and "no data model" in f.data["bayes"]["bayes_reason"]
    assert f.final["regime_rule"].startswith("the error itself")
