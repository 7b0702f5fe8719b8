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
def test_paper_large_noise_setting_is_harmful():
    """(d, |mu|) = (4500, 5): the paper's harmful overfitting (its notebook:
    train 1.0, test 0.91). Every label is fitted, the error (0.11-0.14) stays
    far above the Bayes error (1.8e-4): harmful (SPEC §3), although the same
    runs with clean labels err 0.10-0.12 already (label noise itself costs
    0.006-0.018); uniform attention, untrained, errs 0.106."""
    finals = _runs({"d": 4500, "signal_norm": 5}, range(5))
    assert sum(f["regime"] == "harmful" for f in finals) >= 4, [f["regime"] for f in finals]
    for f in finals:
        assert f["bayes_error"] == pytest.approx(1.78e-4, rel=3e-3) and f["pop_error"] > 0.09
        assert not f["generalized"] and f["error_clean_twin"] > 0.09
        assert 0 < f["label_noise_cost"] < 0.03 and f["pop_error_uniform"] == pytest.approx(0.1056, abs=1e-4)


def test_signal_two_is_harmful_and_the_default_run_benign():
    """|mu| = 2: error 0.33 against a Bayes error of 0.077 (harmful); the
    default run: error 5e-9 (benign); without flips neither verdict applies."""
    low = attnsim.simulate({"signal_norm": 2.0, "pop_log_points": 2, "log_every": 500}).final
    assert low["regime"] == "harmful" and low["bayes_error"] == pytest.approx(0.0766, abs=1e-4)
    default = attnsim.simulate({"pop_log_points": 2, "log_every": 500}).final
    assert default["regime"] == "benign" and not default["regime_borderline"]
    for norm in (2.0, 20.0):
        clean = attnsim.simulate({"signal_norm": norm, "noise_rate": 0.0, "pop_log_points": 2}).final
        assert clean["regime"] == "clean_labels"


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
