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
    finals = _runs({"d": 4500, "signal_norm": 5}, range(5))
    assert sum(f["regime"] == "harmful" for f in finals) >= 4
    assert all(f["pop_error"] > 0.09 for f in finals if f["regime"] == "harmful")


@pytest.mark.slow
def test_paper_large_signal_setting_keeps_noisy_samples_unfitted():
    finals = _runs({"d": 1000, "signal_norm": 100, "steps": 500}, range(10))
    ok = [
        f["regime"] == "not_overfitting" and f["train_acc"] == 0.8 and f["pop_error"] < 1e-3 for f in finals
    ]
    assert sum(ok) >= 9
