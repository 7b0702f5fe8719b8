"""Engines against each other: reduced = dense exactly, implicit = dense in law."""

import numpy as np
import pytest
from scipy import stats

import attnsim
from attnsim.config import Config, ConfigError
from attnsim.data.dataset import make_streams
from attnsim.data.synthetic import generate
from attnsim.models.attention.draws import bartlett
from attnsim.models.attention.engines import build, build_implicit, generated_coordinates
from attnsim.models.attention.linalg import orthonormal_basis
from attnsim.models.attention.plan import choose_engine

MODES = ("p", "W,p", "p,nu", "W,p,nu", "W", "W,nu", "nu")
ARRAYS = ("train_loss", "train_acc", "pop_error", "pop_loss", "pop_score_relevant", "score_clean_relevant",
          "score_noisy_weak_opposite", "frakS_clean", "p_norm", "W_dev")  # fmt: skip
ALPHA = 1e-3  # family-wise significance of the distribution tests below
N_DIST_TESTS = 12


# The population error's importance sampler places its components at design points found by
# Newton's method, which stops at a step below 1e-7 relative: states equal to 1e-13 may stop one
# iteration apart, moving the estimate by up to ~1e-10 relative (measured: 1.4e-10) on some machines.
POP_ERROR_RTOL = 1e-8


def _same(a, b, keys=ARRAYS, rtol=1e-10):
    for key in keys:
        tol = max(rtol, POP_ERROR_RTOL) if key == "pop_error" else rtol
        np.testing.assert_allclose(a.trajectory[key], b.trajectory[key], rtol=tol, atol=1e-13, err_msg=key)


@pytest.mark.parametrize("train", MODES)
def test_reduced_equals_dense_for_every_training_mode(train):
    init_p = "zeros" if "p" in train else "gaussian"
    cfg = {"n": 6, "T": 5, "d": 70, "signal_norm": 6.0, "steps": 80, "log_every": 8, "lr": 0.05,
           "train": train, "init_p": init_p, "pop_points": 256}  # fmt: skip
    a = attnsim.simulate({**cfg, "engine": "dense"})
    b = attnsim.simulate({**cfg, "engine": "reduced"})
    _same(a, b)


@pytest.mark.parametrize("train", ["p", "W,p", "p,nu"])
def test_identity_setup_keeps_q_in_span_Q_and_equals_dense(train):
    """W(0) = I, p(0) = 0: R = Q, W~(0) = I and U_perp None, no d x d pass and no second
    basis; the generated tokens' coordinates come from the basis's factor (no X Q product)."""
    cfg = {"n": 6, "T": 5, "d": 70, "signal_norm": 6.0, "steps": 80, "log_every": 8, "lr": 0.05,
           "train": train, "init_W": "identity", "pop_points": 256}  # fmt: skip
    a = attnsim.simulate({**cfg, "engine": "dense"})
    b = attnsim.simulate({**cfg, "engine": "reduced"})
    _same(a, b)
    pb = b.problem
    assert pb.U_perp is None and pb.R is pb.Q and np.array_equal(pb.W0, np.eye(pb.k))
    noise = make_streams(0).data.standard_normal((6 * 5, 70))
    A = np.zeros((70, 6 * 5 + 2))
    A[2:, :30], A[0, 30], A[1, 31] = noise[:, 2:].T, 1.0, 1.0
    Q, factor = orthonormal_basis(A, with_factor=True)
    np.testing.assert_allclose(generated_coordinates(noise, Q, factor), noise @ Q, rtol=0, atol=1e-13)


def test_p_alone_with_many_tokens_reads_half_of_b_and_equals_dense():
    """W(0) = I fixed and n T = 800 tokens: the reduced engine's B is their triangular
    factor and the signal columns, read in halves (token_blocks); the run equals the dense
    engine's to rounding."""
    from attnsim.models.attention.token_blocks import pass_blocks

    cfg = {"n": 100, "T": 8, "d": 1000, "signal_norm": 20.0, "steps": 60, "log_every": 20, "lr": 0.05,
           "train": "p", "init_W": "identity", "pop_points": 256, "clean_twin": False}  # fmt: skip
    a = attnsim.simulate({**cfg, "engine": "dense"})
    b = attnsim.simulate({**cfg, "engine": "reduced"})
    _same(a, b, keys=[k for k in ARRAYS if k != "W_dev"])
    assert pass_blocks(b.problem.X2, 8).tail.shape == (800, 2)


@pytest.mark.parametrize("init_W", ["kaiming_uniform", "gaussian", "identity"])
def test_reduced_lift_equals_dense_state_with_rectangular_W(init_W):
    cfg = Config(n=5, T=4, d=60, signal_norm=5.0, steps=40, lr=0.1, train="W,p,nu", init_W=init_W,
                 init_p="gaussian", loss="linear")  # fmt: skip
    streams = make_streams(3)
    ds = generate(cfg, streams)
    dense, _ = build(cfg, ds, make_streams(3), "dense", "", attnsim.Workspace())
    red, _ = build(cfg, ds, make_streams(3), "reduced", "", attnsim.Workspace())
    assert red.r == red.k + 1 or init_W == "identity"  # p(0) adds a direction to R
    from attnsim.models.attention.steppers import ModelArrays, Segment

    rel = np.ones(ds.y.size * 4)
    segs = [
        Segment(ModelArrays(pb.X2, pb.y, pb.W0, pb.p0, pb.nu0, 4, cfg.lr, cfg.train_set, cfg.loss, rel))
        for pb in (dense, red)
    ]
    for seg in segs:
        seg.advance(0, cfg.steps)
    full = red.lift(segs[1].W, segs[1].p, segs[1].nu)
    np.testing.assert_allclose(full["q"], segs[0].W @ segs[0].p, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(full["W"], segs[0].W, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(full["nu"], segs[0].nu, rtol=1e-10, atol=1e-13)
    qk, qq = red.q_norm2(segs[1].W, segs[1].p)
    assert qq == pytest.approx(float(full["q"] @ full["q"]), rel=1e-10)


def test_reduced_equals_dense_with_user_arrays(fixture_path, tmp_path):
    f = dict(np.load(fixture_path))
    n, T, _ = f["X"].shape
    f["roles"] = np.tile(np.repeat(np.arange(4), (1, 1, 1, T - 3)), (n, 1))  # the paper's layout
    f["rho"] = np.array(0.1)
    path = tmp_path / "peer_with_roles.npz"
    np.savez(path, **f)
    cfg = {"lr": float(f["lr"]), "steps": 100, "log_every": 10, "pop_points": 256}
    a = attnsim.simulate({**cfg, "engine": "dense"}, data=path)
    b = attnsim.simulate({**cfg, "engine": "reduced"}, data=path)
    assert np.isfinite(a.final["pop_error"])
    _same(a, b)


def test_reduced_engine_never_forms_a_d_by_d_matrix(monkeypatch):
    """Above KEEP_W0_BYTES the reduced setup streams W(0) in blocks: its peak
    memory (NumPy allocations are traced) stays well below one d x d array,
    and it gives the numbers of the setup that keeps W(0) (to rounding)."""
    import tracemalloc

    from attnsim import init
    from attnsim.models.attention import plan

    d = 1500
    cfg = {"n": 4, "T": 4, "d": d, "steps": 5, "engine": "reduced", "pop_points": 256}
    kept = attnsim.simulate(cfg, workspace=attnsim.Workspace())
    monkeypatch.setattr(init, "BLOCK_ELEMENTS", 100 * d)  # blocks of 100 rows
    monkeypatch.setattr(plan, "KEEP_W0_BYTES", 0)
    tracemalloc.start()
    try:
        r = attnsim.simulate(cfg, workspace=attnsim.Workspace())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.engine["used"] == "reduced"
    assert peak < 0.25 * 8 * d * d, peak  # a d x d float64 array alone is 18 MB
    for key in ("train_loss", "pop_error", "W_dev"):  # the products summed over other blocks: rounding
        np.testing.assert_allclose(r.trajectory[key], kept.trajectory[key], rtol=1e-12, err_msg=key)
    dense = attnsim.simulate({"n": 4, "T": 4, "d": d, "steps": 5, "engine": "dense", "pop_points": 256})
    np.testing.assert_allclose(r.trajectory["train_loss"], dense.trajectory["train_loss"], rtol=1e-12)


def test_engine_choice_and_errors():
    assert choose_engine(Config(), False)[0] == "reduced"
    assert choose_engine(Config(d=10**6, init_W="gaussian"), False)[0] == "implicit"
    with pytest.raises(ConfigError, match="init_W=gaussian"):
        choose_engine(Config(d=10**6), False)
    with pytest.raises(ConfigError, match="--data"):
        choose_engine(Config(engine="implicit", init_W="gaussian"), True)
    with pytest.raises(ConfigError, match="init_W=gaussian"):
        choose_engine(Config(engine="implicit"), False)
    with pytest.raises(ConfigError, match="d >= n"):
        choose_engine(Config(engine="implicit", init_W="gaussian", d=100), False)
    with pytest.raises(ConfigError, match="init_p=zeros"):
        choose_engine(Config(engine="implicit", init_W="gaussian", init_p="gaussian"), False)


# -- implicit engine: components in distribution --------------------------------


def _ks(sample, cdf):
    return stats.kstest(sample, cdf).pvalue


def _check(p):
    assert p > ALPHA / N_DIST_TESTS, p


@pytest.mark.slow
@pytest.mark.parametrize("d,k", [(40, 6), (9, 6)])  # the second: d - k < k (trapezoidal U)
def test_implicit_factor_matches_dense_R_factor(d, k):
    rng = np.random.default_rng(11)
    reps, s = 4000, 0.7
    dense_diag, dense_off, imp_diag, imp_off = [], [], [], []
    for _ in range(reps):
        G = s * rng.standard_normal((d, k))
        Rf = np.linalg.qr(G, mode="r")
        sign = np.sign(np.diag(Rf))
        Rf = sign[:, None] * Rf  # positive diagonal convention
        dense_diag.append(np.diag(Rf)[[0, k - 1]])
        dense_off.append(Rf[0, 1])
        B = bartlett(rng, k, k, d, s, lower=False)
        imp_diag.append(np.diag(B)[[0, k - 1]])
        imp_off.append(B[0, 1])
    dd, idg = np.array(dense_diag), np.array(imp_diag)
    for j, dof in ((0, d), (1, d - k + 1)):
        _check(stats.ks_2samp(dd[:, j], idg[:, j]).pvalue)
        _check(_ks((idg[:, j] / s) ** 2, stats.chi2(dof).cdf))
    _check(stats.ks_2samp(dense_off, imp_off).pvalue)


@pytest.mark.slow
@pytest.mark.parametrize("d,k", [(400, 30), (45, 30)])
def test_implicit_qperp_norm_follows_scaled_chi2(d, k):
    rng = np.random.default_rng(5)
    s, reps = 0.3, 3000
    p = rng.standard_normal(k)
    ratios = []
    for _ in range(reps):
        U = bartlett(rng, min(k, d - k), k, d - k, s, lower=False)
        ratios.append(np.sum((U @ p) ** 2) / (p @ p) / s**2)
    _check(_ks(np.array(ratios), stats.chi2(d - k).cdf))


@pytest.mark.slow
def test_implicit_token_gram_matches_dense_tokens():
    cfg = Config(n=3, T=4, d=20, signal_norm=3.0, rho=0.5, init_W="gaussian", noise_rate=0.0)
    reps = 1500
    imp, dense = [], []
    for seed in range(reps):
        pb, _ = build_implicit(cfg, make_streams(seed), "")
        G = pb.X2 @ pb.X2.T
        imp.append(G[np.triu_indices(12)])
        X = generate(cfg, make_streams(seed)).X.reshape(12, 20)
        dense.append((X @ X.T)[np.triu_indices(12)])
    imp, dense = np.array(imp), np.array(dense)
    # relevant-token norm, a noise-noise product and a signal-signal product
    for col in (0, 1, 5):
        _check(stats.ks_2samp(imp[:, col], dense[:, col]).pvalue)
    np.testing.assert_allclose(imp.mean(axis=0), dense.mean(axis=0), atol=1.5)


@pytest.mark.slow
def test_implicit_end_to_end_matches_dense_gaussian_engine():
    cfg = {"n": 10, "T": 6, "d": 400, "signal_norm": 4.0, "steps": 200, "log_every": 200,
           "init_W": "gaussian", "pop_points": 1024, "lr": 0.02}  # fmt: skip
    out = {"implicit": [], "reduced": []}
    for seed in range(40):
        for engine in out:
            f = attnsim.simulate({**cfg, "engine": engine, "seed": seed}).final
            out[engine].append([f["pop_error"], f["train_loss"], f["pop_score_relevant"]])
    a, b = np.array(out["implicit"]), np.array(out["reduced"])
    assert 0.05 < a[:, 0].mean() < 0.25  # a setting where the population error is ~0.1
    for j in range(3):
        se = np.hypot(a[:, j].std(ddof=1), b[:, j].std(ddof=1)) / np.sqrt(len(a))
        assert abs(a[:, j].mean() - b[:, j].mean()) < 4 * se, (j, a[:, j].mean(), b[:, j].mean(), se)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["reduced", "implicit"])
def test_finite_test_error_matches_population_error(engine):
    cfg = {"n": 10, "T": 6, "d": 300, "signal_norm": 4.0, "steps": 100, "log_every": 100, "lr": 0.02,
           "init_W": "gaussian", "test_n": 100_000, "engine": engine}  # fmt: skip
    f = attnsim.simulate(cfg).final
    err = 1.0 - f["test_acc"]
    se = np.hypot(np.sqrt(err * (1 - err) / 100_000), f["pop_error_se"])
    assert 0.02 < f["pop_error"] < 0.3
    assert abs(err - f["pop_error"]) < 4 * se
    assert f["test_loss"] == pytest.approx(f["pop_loss"], abs=0.01)


def test_implicit_runs_at_huge_d_reports_population_and_warns():
    with pytest.warns(UserWarning, match="saturated|frozen"):
        cfg = {"init_W": "gaussian", "d": 10**9, "steps": 20, "log_every": 10, "pop_points": 256}
        r = attnsim.simulate(cfg)
    assert r.engine["used"] == "implicit" and np.isfinite(r.final["pop_error"])
    assert any("reduce lr" in w for w in r.warnings)
    sat = next(w for w in r.warnings if w.startswith("attention saturated"))
    assert "at the end, half or more of them since step 10" in sat and "by step" not in sat


def test_a_cached_setup_does_not_carry_one_runs_engine_facts_into_the_next():
    """A gradient flow built from the setup a GD run cached records the facts of its own
    engine, as in a fresh process: no "gd_state" (it has no GD stepper)."""
    cfg = {
        "n": 6,
        "T": 5,
        "d": 300,
        "log_every": 20,
        "pop_points": 256,
        "engine": "reduced",
        "clean_twin": False,
    }
    ws = attnsim.Workspace()
    gd = attnsim.simulate({**cfg, "steps": 40}, workspace=ws)
    flow = {**cfg, "steps": 1e3, "integrator": "flow", "signal_norm": 9.0}
    after = attnsim.simulate(flow, workspace=ws)
    assert len(ws.setups) == 1 and "gd_state" in gd.engine
    assert after.engine == attnsim.simulate(flow, workspace=attnsim.Workspace()).engine
    assert "gd_state" not in after.engine


def test_reduced_setup_is_shared_across_signal_strengths_exactly():
    cfg = {"n": 6, "T": 5, "d": 300, "steps": 60, "log_every": 20, "pop_points": 256, "engine": "reduced"}
    ws = attnsim.Workspace()
    first = attnsim.simulate({**cfg, "signal_norm": 3.0}, workspace=ws)  # fills the cache
    shared = attnsim.simulate({**cfg, "signal_norm": 9.0, "rho": 0.3}, workspace=ws)
    assert len(ws.setups) == 1
    fresh = attnsim.simulate({**cfg, "signal_norm": 9.0, "rho": 0.3}, workspace=attnsim.Workspace())
    dense = attnsim.simulate({**cfg, "signal_norm": 9.0, "rho": 0.3, "engine": "dense"})
    assert first.final["train_loss"] != shared.final["train_loss"]
    _same(shared, fresh)
    _same(shared, dense)
