"""The population integrators (SPEC §17) against independent methods: the quadrature's
population gradient against a d-dimensional Monte Carlo of fresh samples, the flow
against GD at the same lr, and finite-n runs approaching the population flow."""

import warnings

import numpy as np
import pytest

import attnsim
from attnsim.config import Config
from attnsim.data.dataset import make_streams
from attnsim.data.synthetic import clean_labels, data_keys, draw_tokens
from attnsim.models.attention import plan
from attnsim.models.attention.fresh import PopulationGD
from attnsim.models.attention.fresh_problem import build

BASE = {"train": "p,nu", "init_W": "identity", "d": 10, "signal_norm": 3.0, "noise_rate": 0.2}


def _sim(cfg: dict):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return attnsim.simulate(cfg)


def _quadrature_gradient(cfg: Config, p: np.ndarray, nu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pb, _ = build(cfg, make_streams(cfg.seed), "population", "test")
    st = PopulationGD(pb, cfg)
    st.p[:], st.nu[:] = p, nu
    _, g, gnu, _ = st._gradient(st.copies)
    return st._project(g), st._project(gnu)


def _monte_carlo_gradient(cfg: Config, q: np.ndarray, nu: np.ndarray, N: int, seed: int):
    """Mean and standard error of dR/dq and dR/dnu over N fresh d-dimensional samples
    (the label flip averaged exactly), by plain NumPy."""
    y = clean_labels(N)
    X, _ = draw_tokens(data_keys(cfg)._replace(n=N), y, np.random.default_rng(seed))
    X = X.reshape(N, cfg.T, cfg.d)
    z, u = X @ q, X @ nu
    s = np.exp(z - z.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    f = (s * u).sum(axis=1)
    sig = lambda x: 1.0 / (1.0 + np.exp(-x))  # noqa: E731
    a = (1 - cfg.noise_rate) * (-y * sig(-y * f)) + cfg.noise_rate * (y * sig(y * f))  # dl/df
    c = a[:, None] * s * (u - f[:, None])  # dl/dz_t
    gq = np.einsum("it,itk->ik", c, X)
    gn = np.einsum("it,itk->ik", a[:, None] * s, X)
    return [(v.mean(axis=0), v.std(axis=0, ddof=1) / np.sqrt(N)) for v in (gq, gn)]


@pytest.mark.parametrize(
    "p, nu",
    [
        ((0.0, 0.0, 0.0, 0.0), (1 / 3 / np.sqrt(2), -1 / 3 / np.sqrt(2), 0.0, 0.0)),
        ((0.4, -0.2, 0.6, 0.0), (0.2, -0.3, 0.1, 0.25)),
        ((1.5, 0.3, 1.2, 0.0), (0.05, -0.4, -0.3, 0.2)),
    ],
)
def test_quadrature_population_gradient_matches_a_monte_carlo_of_fresh_samples(p, nu):
    cfg = Config(**BASE, integrator="population")
    p, nu = np.array(p), np.array(nu)
    g, gnu = _quadrature_gradient(cfg, p, nu)
    # the quadrature's own error: its spread over independent scramblings (measured: about the
    # Monte Carlo standard error of 2e5 fresh samples)
    scrambles = [np.concatenate(_quadrature_gradient(cfg.replace(seed=s), p, nu)) for s in range(1, 5)]
    sd = np.std(scrambles, axis=0, ddof=1)
    sd_g, sd_nu = np.concatenate([sd[:4], np.zeros(cfg.d - 4)]), np.concatenate([sd[4:], np.zeros(cfg.d - 4)])
    embed = lambda v: np.concatenate([v, np.zeros(cfg.d - 4)])  # noqa: E731  (f3, f4 = e3, e4)
    (mq, sq), (mn, sn) = _monte_carlo_gradient(cfg, embed(p), embed(nu), 200_000, 1)
    for quad, mean, se, sdq in ((g, mq, sq, sd_g), (gnu, mn, sn, sd_nu)):
        z = np.abs(embed(quad) - mean) / np.sqrt(se**2 + sdq**2)
        assert z.max() <= 3.5, (z.round(2), embed(quad), mean)  # 10 components each: max of |N(0,1)|
        assert np.mean(z) <= 1.2


def test_quadrature_error_is_far_below_the_gradient():
    """2^14 quadrature points against 2^16 at a generic state (measured: 1.1 % of the largest
    component at d = 10; the scrambled points' spread is about the Monte Carlo error of 2e5
    fresh samples)."""
    cfg = Config(**BASE, integrator="population")
    p, nu = np.array([0.4, -0.2, 0.6, 0.0]), np.array([0.2, -0.3, 0.1, 0.25])
    g14, n14 = _quadrature_gradient(cfg, p, nu)
    old = plan.POPULATION_SAMPLES
    try:
        plan.POPULATION_SAMPLES = 1 << 16
        g16, n16 = _quadrature_gradient(cfg, p, nu)
    finally:
        plan.POPULATION_SAMPLES = old
    assert np.abs(g14 - g16).max() <= 2e-2 * np.abs(g16).max()
    assert np.abs(n14 - n16).max() <= 2e-2 * np.abs(n16).max()


@pytest.mark.parametrize("train, batch", [("p", 8), ("p,nu", 0), ("W,p", 0)])
def test_population_flow_matches_population_gd_at_a_small_step(train, batch):
    """The flow against GD of the same lr (the variance term per unit time depends on lr,
    so the two share it): Euler's error at lr |mu|^2 = 0.18 over 100 steps."""
    cfg = {**BASE, "d": 1000, "train": train, "batch": batch, "lr": 0.02, "steps": 100, "log_every": 100}
    flow = _sim({**cfg, "integrator": "population_flow"}).final
    gd = _sim({**cfg, "integrator": "population"}).final
    for key in ("pop_score_relevant", "p_norm"):
        assert abs(flow[key] - gd[key]) <= 5e-3 * abs(gd[key]), (key, flow[key], gd[key])
    assert flow["pop_score_relevant"] > 0.14  # it has moved from uniform attention (1/8)


def test_finite_n_runs_tend_to_the_population_flow():
    cfg = {"train": "p", "init_W": "identity", "d": 200, "signal_norm": 3.0, "lr": 0.02, "steps": 1000}
    cfg["log_every"] = 1000
    pop = _sim({**cfg, "integrator": "population_flow"}).final
    gaps = {}
    for n in (50, 2000):
        fin = _sim({**cfg, "n": n}).final
        gaps[n] = {k: abs(fin[k] - pop[k]) for k in ("pop_error", "pop_score_relevant")}
    for k in ("pop_error", "pop_score_relevant"):
        assert gaps[2000][k] < 0.5 * gaps[50][k], gaps


def test_figure_18_exponent_errors_come_from_resampling_the_seeds():
    """The bootstrap over seeds gives no error when every seed scales exactly as d^-1/2 (a
    seed's factor common to all d), and one near the scatter of the group slopes when the
    seeds' deviations are independent across d."""
    from attnsim.cli_args import load_gallery  # the figure code: scripts/gallery of this checkout

    load_gallery()
    from gallery.fig18_many_samples import seed_errors

    ds = (1000, 3000, 10_000, 30_000, 100_000)
    rng = np.random.default_rng(0)
    factor = rng.uniform(0.5, 2.0, (32, 1))
    ex = np.array([[1.07 * d] * 32 for d in ds])
    exact = seed_errors([factor * d**-0.5 * np.ones((32, 60)) for d in ds], ex, ds)
    assert np.all(exact["boot_sd"] < 1e-9)
    noisy = [rng.lognormal(0.0, 1.0, (32, 60)) * d**-0.5 for d in ds]
    ex = np.array([1.07 * d * rng.lognormal(0.0, 0.03, 32) for d in ds])
    err = seed_errors(noisy, ex, ds)
    groups = err["groups"]
    assert groups.shape == (8, 2)
    # 8 groups of 4 seeds scatter about sqrt(8) times the 32-seed error
    ratio = groups.std(axis=0, ddof=1) / err["boot_sd"]
    assert np.all((ratio > 1.0) & (ratio < 6.0)), ratio
