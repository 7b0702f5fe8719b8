"""The fresh-sample integrators (SPEC §17): online SGD against the population risk's GD,
the frame engine against dense d-dimensional batches, and what they refuse."""

import warnings

import numpy as np
import pytest

import attnsim
from attnsim.config import Config, ConfigError

ACCEPT = {
    "train": "p",
    "init_W": "identity",
    "noise_rate": 0.0,
    "signal_norm": 10.0,
    "d": 20000,
    "lr": 0.01,
    "steps": 40,
    "log_every": 40,
}


def _final(cfg: dict, key: str = "pop_score_relevant") -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return attnsim.simulate(cfg).final[key]


def test_online_sgd_mean_matches_the_population_gd_within_its_sampling_error():
    """The issue's acceptance: batch 64, seeds 0-4, within 3 se + 0.02 of the population GD
    (a finite n = 200 run lands at 0.283, so the check has room to fail)."""
    pop = _final({**ACCEPT, "integrator": "population"})
    online = [_final({**ACCEPT, "integrator": "online", "batch": 64, "seed": s}) for s in range(5)]
    mean, se = np.mean(online), np.std(online, ddof=1) / np.sqrt(5)
    assert abs(mean - pop) <= 3 * se + 0.02
    assert abs(mean - pop) <= 3 * se + 0.002  # measured: 0.25982 +- 0.00027 against 0.25987


def test_online_frame_engine_matches_dense_batches_in_distribution():
    base = {
        "train": "p,nu",
        "init_W": "identity",
        "noise_rate": 0.2,
        "signal_norm": 5.0,
        "d": 120,
        "lr": 0.05,
        "steps": 30,
        "log_every": 30,
        "integrator": "online",
        "batch": 16,
    }
    runs = {
        eng: np.array([_final({**base, "engine": eng, "seed": s}, "p_norm") for s in range(24)])
        for eng in ("implicit", "dense")
    }
    diff = runs["implicit"].mean() - runs["dense"].mean()
    se = np.sqrt(sum(v.var(ddof=1) / v.size for v in runs.values()))
    assert abs(diff) <= 4 * se


def test_fresh_integrators_refuse_what_they_cannot_run():
    with pytest.raises(ConfigError, match="init_W=identity"):
        Config(integrator="population")
    with pytest.raises(ConfigError, match="batch"):
        Config(batch=8)
    with pytest.raises(ConfigError, match="engine"):
        Config(integrator="online", engine="reduced")


def test_fresh_runs_have_no_memorization_verdict():
    res = attnsim.simulate({**ACCEPT, "d": 200, "steps": 5, "integrator": "population", "noise_rate": 0.2})
    assert res.final["regime"] == "fresh_samples"
    assert res.final["t_memorize"] is None
