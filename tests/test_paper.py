"""The paper's three settings (SPEC §7 fig. 2) over seeds: regimes as reported."""

import collections

import pytest

import attnsim


def _runs(over, seeds):
    return [attnsim.simulate({**over, "seed": s, "pop_log_points": 2, "log_every": 100}).final for s in seeds]


@pytest.mark.slow
def test_paper_balanced_setting_is_benign():
    finals = _runs({}, range(20))
    count = collections.Counter(f["regime"] for f in finals)
    assert count["benign"] >= 12 and count["benign"] + count["partial"] == 20, count
    for f in finals:
        assert f["score_clean_relevant"] > 0.9 and f["pop_error"] < 1e-3
    longer = collections.Counter(f["regime"] for f in _runs({"steps": 2000}, range(20)))
    assert longer["benign"] >= 17, longer


@pytest.mark.slow
def test_paper_large_noise_setting_errs_without_label_noise_too():
    """(d, |mu|) = (4500, 5): the paper reports harmful overfitting (test
    accuracy 0.87, an absolute error threshold). attnsim finds every sample
    fitted and an error of 0.11-0.14, but the same runs with clean labels err
    0.10-0.12 already: label noise adds 0.006-0.018. By the excess rule
    (SPEC §3) the overfitting itself is benign; the run does not generalize."""
    finals = _runs({"d": 4500, "signal_norm": 5}, range(5))
    for f in finals:
        assert f["n_fitted_noisy"] == f["n_noisy"] and f["pop_error"] > 0.09  # the paper's "harmful"
        assert not f["generalized"] and f["error_clean_twin"] > 0.09
        assert 0 < f["excess_error"] < 0.03 and f["regime"] == "benign"


@pytest.mark.slow
def test_paper_large_signal_setting_at_the_papers_horizon():
    """(1000, 100): the paper reports not overfitting (train 0.8, test 1.0) at
    its 1000 steps. attnsim: no noisy sample is fitted for the first 500
    steps in any of 10 seeds; by step 1000 one or two of the four are in 8 of
    them (partial; train accuracy 0.85-0.9), the error stays below 1e-20:
    "not overfitting" holds for a finite horizon only (SPEC §7, figure 2)."""
    early = _runs({"d": 1000, "signal_norm": 100, "steps": 500}, range(10))
    assert all(f["regime"] == "not_overfitting" and f["train_acc"] == 0.8 for f in early)
    finals = _runs({"d": 1000, "signal_norm": 100}, range(10))
    count = collections.Counter(f["regime"] for f in finals)
    assert count["partial"] >= 8 and count["partial"] + count["not_overfitting"] == 10, count
    assert all(f["pop_error"] < 1e-20 and f["generalized"] for f in finals)
