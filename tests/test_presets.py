"""Presets of the sister papers and Magen et al.'s data model (SPEC §15)."""

import json
import math
import time

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import ndtr

import attnsim
from attnsim.cli import main
from attnsim.config import Config, ConfigError, from_mapping
from attnsim.data.dataset import make_streams
from attnsim.data.synthetic import generate
from attnsim.models.attention.population.magen import MagenPopulation
from attnsim.presets import PRESETS
from attnsim.sweep.spec import record_key

MAGEN_SMALL = {"preset": "magen2025", "n": 40, "d": 300, "signal_norm": 3.0}
# i.i.d. flips realize a count of their own, and the runs say so
pytestmark = pytest.mark.filterwarnings("ignore:label noise. .* noisy samples realized")


def test_magen_tokens_are_the_signal_exactly_and_noise_orthogonal_to_it():
    cfg = from_mapping({**MAGEN_SMALL, "shuffle_roles": True})
    ds = generate(cfg, make_streams(cfg.seed))
    sig = ds.roles == 0
    assert (sig.sum(axis=1) == 1).all() and 0 < sig[:, 0].sum() < cfg.n  # one signal token, at either place
    mu = ds.mu_pos
    np.testing.assert_array_equal(ds.X[sig], ds.y_clean[:, None] * mu)  # y mu, no noise
    noise = ds.X[~sig]
    assert np.abs(noise @ mu).max() < 1e-12 * np.abs(noise).max() * np.linalg.norm(mu)
    assert np.isclose(np.mean(np.sum(noise**2, axis=1)), cfg.d - 1, rtol=0.05)  # sigma^2 (d - 1)
    np.testing.assert_array_equal(ds.mu_neg, -mu)
    assert not ds.nu.any()  # init_nu = zeros


def _scalars(q, nu, mu):
    return (q @ mu, -q @ mu, q @ nu, q @ q, nu @ mu, -nu @ mu, nu @ nu)


def test_magen_population_at_uniform_attention_is_the_closed_form():
    rng = np.random.default_rng(1)
    mu = np.zeros(20)
    mu[0] = 2.0
    nu = rng.standard_normal(20)
    pop = MagenPopulation(1.5, 2.0).evaluate(*_scalars(np.zeros(20), nu, mu))
    e, c = nu @ mu, 1.5 * math.hypot(*nu[1:])
    assert pop["pop_error"] == pytest.approx(float(ndtr(-e / c)), rel=1e-12)
    assert pop["pop_score_relevant"] == pytest.approx(0.5, abs=1e-12)


def _error_given_value(q, nu, mu, sigma):
    """The error by the other order of integration: given the noise token's value
    u, an error needs its logit z above ya - log(-y u / e) (e = nu . mu > 0), a
    Gaussian tail in z given u; then one quadrature over u. An independent method."""
    m = np.linalg.norm(mu)
    P = np.eye(mu.size) - np.outer(mu, mu) / m**2
    A, B, C = sigma**2 * (q @ P @ q), sigma**2 * (q @ P @ nu), sigma**2 * (nu @ P @ nu)
    e, a = nu @ mu, q @ mu
    total = 0.0
    for y in (1.0, -1.0):

        def given_u(u, y=y):
            if y * u >= 0:
                return 0.0
            thr = y * a - math.log(-y * u / e)
            mean, sd = B / C * u, math.sqrt(max(A - B * B / C, 0.0))
            return float(ndtr((mean - thr) / sd)) * math.exp(-u * u / (2 * C)) / math.sqrt(2 * math.pi * C)

        total += quad(given_u, -40 * math.sqrt(C), 40 * math.sqrt(C), points=[0.0], limit=400,
                      epsabs=0.0, epsrel=1e-11)[0] / 2  # fmt: skip
    return total


def test_magen_population_matches_an_independent_two_dimensional_rule_and_a_test_set():
    r = attnsim.simulate({**MAGEN_SMALL, "signal_norm": 2.0, "test_n": 40000})
    q, nu = r.state["W"] @ r.state["p"], r.state["nu"]
    mu = r.problem.mu_pos
    t = r.trajectory
    err, score = t["pop_error"][-1], t["pop_score_relevant"][-1]
    assert 0.01 < err < 0.4  # a state whose error a test set resolves
    test_err = 1 - t["test_acc"][-1]
    assert abs(test_err - err) < 4 * math.sqrt(err * (1 - err) / 40000)
    assert nu @ mu > 0 and err == pytest.approx(_error_given_value(q, nu, mu, 1.0), rel=1e-8)
    assert 0 < score < 1
    assert t["pop_error_se"][-1] < 1e-8 * err and r.data["population"].startswith("one-dimensional")


def test_magen_population_resolves_tiny_errors_in_the_tail():
    mu = np.zeros(10)
    mu[0] = 1.0
    nu = np.zeros(10)
    nu[0], nu[1], nu[2] = 1e4, 1.0, 0.2  # an error near Phi(-14)
    q = np.zeros(10)
    q[1] = 0.5
    out = MagenPopulation(1.0, 1.0).evaluate(*_scalars(q, nu, mu))
    assert 0 < out["pop_error"] < 1e-10 and out["pop_error_resolved"] == 1.0
    assert out["pop_error_se"] < 1e-6 * out["pop_error"]
    assert out["pop_error"] == pytest.approx(_error_given_value(q, nu, mu, 1.0), rel=1e-7)


def test_magen_population_below_float64_is_a_flagged_bound_and_an_exact_zero_is_not():
    """An error that underflows is not printed as 0 +- 0 (resolved): it is an upper
    bound, flagged; a value that is exactly determined (nu along mu) is 0 exactly."""
    mu = np.zeros(10)
    mu[0] = 1.0
    nu = np.zeros(10)
    nu[0], nu[1] = 50.0, 0.01  # uniform attention, the value's noise tiny: Phi(-5000)
    out = MagenPopulation(1.0, 1.0).evaluate(*_scalars(np.zeros(10), nu, mu))
    assert (
        out["pop_error_resolved"] == 0.0 and 0 < out["pop_error"] <= 1e-299 and np.isnan(out["pop_error_se"])
    )
    nu[1] = 0.0
    exact = MagenPopulation(1.0, 1.0).evaluate(*_scalars(np.zeros(10), nu, mu))
    assert exact["pop_error"] == 0.0 and exact["pop_error_se"] == 0.0 and exact["pop_error_resolved"] == 1.0


def test_magen_preset_is_benign_after_two_steps_within_seconds(tmp_path, capsys):
    t = time.perf_counter()
    assert main(["run", "--preset", "magen2025", "--out", str(tmp_path / "r")]) == 0
    assert time.perf_counter() - t < 30  # a few seconds here once the kernels are compiled
    out = capsys.readouterr().out
    assert "regime: benign" in out and "memorized at step 2" in out
    r = attnsim.simulate({"preset": "magen2025"})
    f = r.final
    assert r.config["steps"] == 2 and f["n_fitted_noisy"] == f["n_noisy"] > 0
    assert f["n_fitted_clean"] == f["n_clean"] and f["excess_error"] < 0.01 and f["bayes_error"] == 0.0


def test_magen_runs_are_the_same_in_the_dense_and_reduced_engines():
    a, b = (attnsim.simulate({**MAGEN_SMALL, "engine": e}).trajectory for e in ("dense", "reduced"))
    for key in ("train_loss", "pop_error", "pop_score_relevant"):
        np.testing.assert_allclose(a[key], b[key], rtol=1e-9, atol=1e-14)


def test_keys_set_with_a_preset_override_it_and_the_label_is_not_hashed():
    cfg = from_mapping({"preset": "magen2025", "n": 30, "lr": 0.1})
    want = {**PRESETS["magen2025"].values, "n": 30, "lr": 0.1}
    assert all(getattr(cfg, k) == v for k, v in want.items()) and cfg.preset == "magen2025"
    assert record_key(cfg) == record_key(Config(**want)) and cfg.hash() == Config(**want).hash()
    assert from_mapping({"preset": "sakamoto2025"}).hash() == Config().hash()


@pytest.mark.parametrize(
    "values, match",
    [
        ({"preset": "magen"}, "preset: 'magen' is not one of sakamoto2025, magen2025"),
        ({"preset": "jiang2024"}, "preset: jiang2024 has no run"),
        ({"data_model": "magen2025"}, "data_model: magen2025 has T = 2 tokens"),
        ({"preset": "magen2025", "engine": "implicit", "init_W": "gaussian", "d": 400}, "engine: implicit"),
        ({"preset": "magen2025", "limit": True}, "limit: the max-margin limit is built for"),
        (
            {"model": "encoder", "init_nu": "zeros"},
            r"init_nu: model=encoder does not read it \(the encoder has its own head",
        ),
    ],
)
def test_bad_presets_and_data_models_are_refused_in_one_line(values, match):
    with pytest.raises(ConfigError, match=match):
        attnsim.simulate({**values, "steps": 2})


def test_presets_command_lists_every_preset_with_its_source(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    for name, p in PRESETS.items():
        assert name in out and p.source.split(",")[0] in out


def test_a_preset_in_a_toml_file_is_overridden_by_the_file_and_by_set(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('preset = "magen2025"\nn = 30\nd = 400\n')
    out = tmp_path / "r"
    assert main(["run", str(toml), "--set", "lr=0.2", "--out", str(out), "--quiet"]) == 0
    cfg = json.loads((out / "result.json").read_text())["config"]
    assert (cfg["preset"], cfg["n"], cfg["d"], cfg["lr"], cfg["T"], cfg["data_model"]) == (
        "magen2025",
        30,
        400,
        0.2,
        2,
        "magen2025",
    )
