"""Data generation, label noise rules, seeds and user-supplied arrays."""

import warnings

import numpy as np
import pytest

from attnsim.config import Config
from attnsim.data.dataset import DataError, make_streams
from attnsim.data.files import load_npz
from attnsim.data.synthetic import clean_labels, flip_mask, generate, head
from attnsim.init import W0_blocks, W0Init, draw_W0


def _flips(n, eta, mode, seed=0):
    cfg = Config(n=n, noise_rate=eta, label_noise=mode, d=4)
    y = clean_labels(n)
    return flip_mask(cfg.label_noise, cfg.noise_rate, y, np.random.default_rng(seed)), y


def test_label_noise_balanced_rules():
    m, y = _flips(20, 0.2, "balanced")
    assert m.sum() == 4 and m[y > 0].sum() == 2 and m[:2].all() and m[10:12].all()
    m, _ = _flips(20, 0.05, "balanced")  # ceil(1) = 1, floor(1/2) = 0 per class
    assert m.sum() == 0


def test_label_noise_exact_rounds_half_up_with_exact_arithmetic():
    m, y = _flips(100, 0.07, "exact")  # 100 * 0.07 is 7 exactly
    assert m.sum() == 7 and m[y > 0].sum() == 4 and m[y < 0].sum() == 3
    m, _ = _flips(10, 0.25, "exact")  # 2.5 rounds up to 3
    assert m.sum() == 3
    m, _ = _flips(20, 0.05, "exact")
    assert m.sum() == 1 and m[0]


def test_label_noise_iid_rate():
    m, _ = _flips(20000, 0.2, "iid")
    assert abs(m.mean() - 0.2) < 0.01


def test_realized_noise_count_warns_when_off_by_more_than_one():
    ds = generate(Config(n=20, d=10, noise_rate=0.1), make_streams(0))
    assert ds.n_noisy == 2 and not ds.warnings
    cfg = Config(n=100, d=4, noise_rate=0.2, label_noise="iid")
    for seed in range(20):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = generate(cfg, make_streams(seed))
        off = abs(ds.n_noisy - 20) > 1
        assert bool(ds.warnings) == off == bool(caught)


@pytest.mark.parametrize(
    "n,eta,rule", [(2, 0.5, "balanced"), (4, 0.2, "balanced"), (20, 0.05, "balanced"), (4, 0.1, "exact")]
)
def test_a_flip_rule_that_flips_no_label_says_so(n, eta, rule):
    """Off by less than one from n eta, and silent before: the run had clean labels."""
    with pytest.warns(UserWarning, match=f"label_noise={rule} flips no label at n = {n}"):
        ds = generate(Config(n=n, d=10, noise_rate=eta, label_noise=rule), make_streams(0))
    assert ds.n_noisy == 0 and "the labels are clean" in ds.warnings[0]


def test_tokens_have_roles_means_and_noise():
    cfg = Config(n=400, T=6, d=30, signal_norm=7.0, rho=0.3, sigma=2.0)
    ds = generate(cfg, make_streams(1))
    assert ds.X.shape == (400, 6, 30)
    pos = ds.y_clean > 0
    m = ds.X[pos].mean(axis=0)
    np.testing.assert_allclose(m[:, :2], [[7, 0], [2.1, 0], [0, 2.1], [0, 0], [0, 0], [0, 0]], atol=0.35)
    m = ds.X[~pos].mean(axis=0)
    np.testing.assert_allclose(m[:, :2], [[0, 7], [0, 2.1], [2.1, 0], [0, 0], [0, 0], [0, 0]], atol=0.35)
    assert ds.X[:, :, 2:].std() == pytest.approx(2.0, rel=0.02)
    np.testing.assert_array_equal(ds.roles[0], [0, 1, 2, 3, 3, 3])
    np.testing.assert_allclose(ds.nu @ ds.mu_pos, 1 / np.sqrt(2))


def test_shuffled_roles_follow_the_roles_array():
    cfg = Config(n=50, T=6, d=20, signal_norm=50.0, shuffle_roles=True)
    ds = generate(cfg, make_streams(2))
    own = np.where(ds.y_clean > 0, 0, 1)
    rel = ds.roles == 0
    assert np.all(np.sort(ds.roles, axis=1) == [0, 1, 2, 3, 3, 3])
    assert len({tuple(r) for r in ds.roles}) > 1
    vals = ds.X[np.arange(50)[:, None], np.arange(6)[None, :], own[:, None]]
    assert np.all(vals[rel] > 30) and np.all(vals[~rel & (ds.roles != 1)] < 30)


def test_seed_reproducible():
    cfg = Config(n=10, d=50)
    a, b = generate(cfg, make_streams(5)), generate(cfg, make_streams(5))
    np.testing.assert_array_equal(a.X, b.X)
    c = generate(cfg, make_streams(6))
    assert not np.allclose(a.X, c.X)
    # the training tokens do not depend on the signal strength's noise draws
    d = generate(cfg.replace(signal_norm=3.0), make_streams(5))
    np.testing.assert_array_equal(a.X[:, :, 2:], d.X[:, :, 2:])


def test_W0_row_blocks_equal_one_draw(monkeypatch):
    from attnsim import init

    cfg = Config(d=600)
    full = draw_W0(W0Init(cfg.init_W, cfg.W_scale), make_streams(0).init, cfg.d)
    a = cfg.W_scale * np.sqrt(3.0)
    ref = np.random.default_rng(0).spawn(4)[1].uniform(-a, a, (600, 600))
    np.testing.assert_array_equal(full, ref)
    blocks = [
        (lo, b.copy()) for lo, b in W0_blocks(W0Init(cfg.init_W, cfg.W_scale), make_streams(0).init, 600)
    ]
    np.testing.assert_array_equal(np.concatenate([b for _, b in blocks]), full)
    assert [lo for lo, _ in blocks] == [0]
    monkeypatch.setattr(init, "BLOCK_ELEMENTS", 100 * 600)
    blocks = [
        (lo, b.copy()) for lo, b in W0_blocks(W0Init(cfg.init_W, cfg.W_scale), make_streams(0).init, 600)
    ]
    np.testing.assert_array_equal(np.concatenate([b for _, b in blocks]), full)
    assert [lo for lo, _ in blocks] == [0, 100, 200, 300, 400, 500]
    g = draw_W0(W0Init("gaussian", Config(d=600, init_W="gaussian").W_scale), make_streams(0).init, 600)
    assert g.std() == pytest.approx((3 * 600) ** -0.5, rel=0.01)
    np.testing.assert_array_equal(draw_W0(W0Init("identity", 1.0), make_streams(0).init, 5), np.eye(5))


@pytest.mark.parametrize("d", [1, 2, 7, 301])
@pytest.mark.parametrize("one_thread", [False, True])
def test_W0_drawn_in_two_halves_at_once_is_the_sequential_draw(d, one_thread, monkeypatch):
    """fill_W0 draws the halves of the rows from copies of the stream jumped
    ahead: the same numbers as one sequential draw, and the stream is left
    where the sequential draw leaves it (p(0) comes next)."""
    from attnsim.init import fill_W0

    if one_thread:
        monkeypatch.setenv("NUMBA_NUM_THREADS", "1")
    cfg = Config(d=max(d, 2))
    seq, fast = make_streams(5).init, make_streams(5).init
    ref = np.empty((d, d))
    for _ in W0_blocks(W0Init(cfg.init_W, cfg.W_scale), seq, d, out=ref):
        pass
    out = fill_W0(W0Init(cfg.init_W, cfg.W_scale), fast, np.full((d, d), np.nan))
    np.testing.assert_array_equal(out, ref)
    assert fast.bit_generator.state == seq.bit_generator.state
    np.testing.assert_array_equal(fast.standard_normal(3), seq.standard_normal(3))


@pytest.mark.parametrize("init_W", ["kaiming_uniform", "gaussian"])
def test_kept_draws_give_every_W0_the_fresh_draw_and_stream_state(init_W, monkeypatch):
    """With the draws kept (sweep workers), W(0) of any d, in any order (a prefix
    of the kept numbers, or more than are kept), equals a fresh draw bit for
    bit, and the stream is left where the fresh draw leaves it; another seed,
    or a stream moved on, is not confused with the kept one."""
    from attnsim.init import fill_W0
    from attnsim.runtime import workspace

    monkeypatch.setattr(workspace, "DRAW_CHUNK", 1024)  # many chunk boundaries at small d
    kept = workspace.KeptDraws(max_bytes=8 * 700**2)

    def draw(d, seed, on, skip=0):
        kept.enabled = on
        rng = make_streams(seed).init
        rng.random(skip)
        cfg = Config(d=d, init_W=init_W)
        W = fill_W0(W0Init(cfg.init_W, cfg.W_scale), rng, np.full((d, d), np.nan), kept)
        return W, rng.bit_generator.state, rng.standard_normal(3)

    for d, seed, skip in [(300, 0, 0), (200, 0, 0), (32, 0, 0), (33, 0, 0), (500, 0, 0), (300, 1, 0),
                          (300, 0, 5), (700, 0, 0), (701, 0, 0), (64, 0, 0)]:  # fmt: skip
        fresh, used = draw(d, seed, False, skip), draw(d, seed, True, skip)
        np.testing.assert_array_equal(used[0], fresh[0])
        assert used[1] == fresh[1]
        np.testing.assert_array_equal(used[2], fresh[2])
    assert kept.size == 700**2 + 1024 - 700**2 % 1024  # 701 was above max_bytes: drawn afresh
    kept.enabled = False
    assert kept.take(make_streams(0).init, 10, init_W) is None
    kept.enabled = True
    assert kept.take(make_streams(0).init, 10, "identity") is None


def _write(tmp_path, **arrays):
    path = tmp_path / "d.npz"
    np.savez(path, **arrays)
    return path


def test_load_npz_accepts_the_full_schema(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((4, 3, 5))
    mu_p, mu_n = np.eye(5)[0] * 2, np.eye(5)[1] * 2
    path = _write(
        tmp_path,
        X=X,
        y=np.array([1, 1, -1, -1]),
        y_clean=np.array([1, -1, -1, -1]),
        roles=np.tile([0, 1, 3], (4, 1)),
        mu_pos=mu_p,
        mu_neg=mu_n,
        sigma=np.array(1.5),
        rho=np.array(0.2),
        W0=np.eye(5),
        p0=np.ones(5),
        X_test=X[:2],
        y_test=np.array([1, -1]),
    )
    ds = load_npz(path)
    assert ds.n_noisy == 1 and ds.role_counts == (1, 1, 0, 1) and ds.sigma == 1.5 and ds.rho == 0.2
    np.testing.assert_allclose(ds.nu, head(mu_p, mu_n))
    assert ds.population_reason is None
    ds.rho = None  # weakly relevant tokens present: rho is needed
    assert "rho" in ds.population_reason


BAD_DATA = [
    ({}, "missing required array 'X'"),
    ({"X": np.zeros((4, 3))}, "'X' has shape"),
    ({"y": np.zeros(4)}, "'y' must hold labels"),
    ({"y": np.ones(3)}, "'y' has shape"),
    ({"X": np.full((4, 3, 5), np.nan)}, "'X' contains NaN"),
    ({"X": np.array([["a"]])}, "'X' must be numeric"),
    ({"roles": np.full((4, 3), 7)}, "'roles'"),
    ({"mu_pos": np.ones(4)}, "'mu_pos' has shape"),
    ({"sigma": np.array(-1.0)}, "'sigma' must be a positive"),
    ({"X_test": np.zeros((2, 3, 5))}, "given together"),
    ({"W0": np.eye(4)}, "'W0' has shape"),
]


@pytest.mark.parametrize("change,needle", BAD_DATA)
def test_load_npz_rejects_bad_arrays_naming_them(tmp_path, change, needle):
    base = {"X": np.zeros((4, 3, 5)), "y": np.array([1, 1, -1, -1]), "nu": np.ones(5)}
    if not change:
        base = {"y": base["y"]}
    base.update(change)
    with pytest.raises(DataError, match=needle):
        load_npz(_write(tmp_path, **base))


def test_load_npz_unreadable_file(tmp_path):
    p = tmp_path / "x.npz"
    p.write_text("not a zip")
    with pytest.raises(DataError, match="not a readable"):
        load_npz(p)
    with pytest.raises(DataError, match="no such data file"):
        load_npz(tmp_path / "none.npz")
