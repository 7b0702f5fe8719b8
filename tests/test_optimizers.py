"""Optimizers other than plain GD (SPEC §15): normalized GD steps each trained
block by lr * G / |G|, exactly in every engine (the reduced and implicit
coordinates are orthonormal frames, so every block's norm is the same there);
the flow and the encoder refuse it."""

from pathlib import Path

import mpmath
import numpy as np
import pytest

import attnsim
from attnsim.config import ADAM_KEYS, Config, ConfigError
from attnsim.models.attention.buffers import Data, work_for
from attnsim.models.attention.kernels import _block_coeffs
from attnsim.models.attention.steppers import ModelArrays, Segment, SegmentXW, make_segment
from attnsim.sweep.spec import _key_of, record_key

QUIET = {"d": 400, "steps": 400, "log_every": 20, "optimizer": "normalized", "lr": 0.002}


def test_normalized_gd_is_the_same_in_the_dense_and_reduced_engines_and_both_step_forms():
    runs = {e: attnsim.simulate({**QUIET, "engine": e}) for e in ("dense", "reduced")}
    a, b = runs["dense"].trajectory, runs["reduced"].trajectory
    assert runs["reduced"].engine["gd_state"] == "W (k x r)"
    for key in ("train_loss", "p_norm", "W_dev"):
        np.testing.assert_allclose(b[key], a[key], rtol=1e-11, atol=1e-14, err_msg=key)
    xw = attnsim.simulate({**QUIET, "engine": "reduced", "log_every": 400, "pop_log_points": 2})
    assert xw.engine["gd_state"] == "X W (n*T x r)"  # log points far apart: the X W form
    assert xw.final["train_loss"] == pytest.approx(a["train_loss"][-1], rel=1e-11)
    assert xw.final["p_norm"] == pytest.approx(a["p_norm"][-1], rel=1e-11)


@pytest.mark.parametrize("train", ["p", "W", "W,p", "W,p,nu"])
def test_every_trained_block_moves_by_exactly_lr_per_step(train):
    rng = np.random.default_rng(1)
    n, T, k = 5, 3, 6
    X, y = rng.standard_normal((n * T, k)), np.where(rng.random(n) < 0.5, -1.0, 1.0)
    W, p, nu = rng.standard_normal((k, k)), rng.standard_normal(k), rng.standard_normal(k)
    seg = Segment(
        ModelArrays(X, y, W, p, nu, T, 0.01, train.split(","), "logistic", np.zeros(n * T)),
        optimizer="normalized",
    )
    for _ in range(5):
        before = {b: v.copy() for b, v in seg.state().items()}
        seg.advance(0, 1)
        for block, now in seg.state().items():
            moved = float(np.linalg.norm(now - before[block]))
            assert moved == pytest.approx(0.01 if block in train.split(",") else 0.0, rel=1e-12, abs=1e-300)


def test_normalized_gd_refuses_the_flow():
    """(The encoder runs it: tests/test_encoder.py, against torch.)"""
    with pytest.raises(ConfigError, match="optimizer"):
        Config(optimizer="normalized", integrator="flow")
    with pytest.raises(ConfigError, match="optimizer"):
        Config(optimizer="sgd")


def test_the_new_key_at_its_default_keeps_every_earlier_record_key_and_run_hash():
    cfg = Config(d=300, noise_rate=0.1)
    old = {k: v for k, v in cfg.to_dict().items() if k != "optimizer"}  # a config from before the key
    assert record_key(cfg) == _key_of(old, None)
    assert record_key(cfg.replace(optimizer="normalized")) != record_key(cfg)
    assert cfg.hash() != cfg.replace(optimizer="normalized").hash()


def test_one_hot_scores_under_normalized_steps_stop_the_run_without_advising_a_smaller_lr():
    cfg = {"train": "p", "init_W": "identity", "d": 200, "lr": 0.05, "optimizer": "normalized",
           "steps": 10**4, "log_scale": "log", "log_points": 30, "noise_rate": 0.0}  # fmt: skip
    with pytest.warns(UserWarning, match=r"frozen after step \d+: .* below exp\(-745\)"):
        r = attnsim.simulate(cfg)
    assert r.trajectory["p_norm"][-1] > 50 and not any("reduce lr" in w for w in r.warnings)


def test_normalized_gd_reaches_the_max_margin_direction_within_ten_thousand_steps():
    """SPEC §15's acceptance: train = p, W = I, d = 200. The top score rounds to 1
    near |p| = 3 (cos 0.997 then); the gradient keeps its direction beyond, until
    every other score underflows (the run then stops moving, and says so)."""
    cfg = {"train": "p", "init_W": "identity", "d": 200, "lr": 0.05, "optimizer": "normalized",
           "steps": 10**4, "log_scale": "log", "log_points": 30, "limit": True}  # fmt: skip
    with pytest.warns(UserWarning, match="frozen after step"):
        r = attnsim.simulate(cfg)
    t = r.trajectory
    assert r.limit["selection"] and r.limit["cos"] >= 0.999
    first = t["step"][np.argmax(t["mm_cos"] >= 0.999)]
    assert t["mm_cos"][-1] >= 0.999 and first <= 2000


def test_the_logit_gradient_keeps_its_direction_when_the_top_score_rounds_to_one():
    """c_t = a s_t (u_t - f) against 50-digit arithmetic, logit gaps 40-700."""
    mpmath.mp.dps = 50
    T = 4
    z = np.array([0.0, -40.0, -90.5, -700.0])
    u = np.array([1.25, -0.5, 2.0, 3.0])
    data = Data(np.zeros((T, 1)), np.ones(1), np.zeros(T), T, 0)
    work = work_for(T, 1, 1, 1)
    work.z[:], work.u[:] = z, u
    _block_coeffs(data, 0, 1, work)
    e = [mpmath.exp(mpmath.mpf(x)) for x in z]
    s = [x / sum(e) for x in e]
    f = sum(si * ui for si, ui in zip(s, u))
    a = -1 / (1 + mpmath.exp(f))
    want = np.array([float(a * si * (ui - f)) for si, ui in zip(s, u)])
    assert want[0] != 0.0 and np.allclose(work.c, want, rtol=1e-12, atol=0)


FIXTURE = Path(__file__).parent / "data" / "optimizers_small.npz"  # by tests/data/record_optimizers.py
PARITY = {
    "adamw": {"train": "W,p", "optimizer": "adam"},
    "adamw_all": {
        "train": "W,p,nu",
        "optimizer": "adam",
        "adam_beta1": 0.8,
        "adam_beta2": 0.99,
        "adam_eps": 1e-6,
        "weight_decay": 0.1,
    },  # fmt: skip
    "normalized": {"train": "W,p,nu", "optimizer": "normalized"},
}


@pytest.mark.parametrize(
    "name, engine",
    [("adamw", "dense"), ("adamw_all", "auto"), ("normalized", "dense"), ("normalized", "reduced")],
)
def test_per_step_losses_equal_torchs_float64_runs(name, engine):
    f = np.load(FIXTURE)
    cfg = {**PARITY[name], "lr": float(f[f"{name}_lr"]), "steps": int(f["steps"]), "log_every": 1,
           "pop_log_points": 2, "engine": engine}  # fmt: skip
    r = attnsim.simulate(cfg, data=FIXTURE)
    loss = r.trajectory["train_loss"]
    np.testing.assert_allclose(loss[:-1], f[f"{name}_loss_before_step"], rtol=1e-9, atol=0)
    assert loss[-1] == pytest.approx(float(f[f"{name}_loss_final"]), rel=1e-9, abs=0)
    assert loss[-1] < 0.7 * loss[0]  # the runs learn


def test_adam_steps_in_chunks_equal_one_call_and_snapshots_keep_the_moments():
    cfg = {"d": 60, "n": 6, "T": 4, "steps": 120, "optimizer": "adam", "lr": 0.01, "pop_log_points": 2}
    whole = attnsim.simulate({**cfg, "log_every": 120}).trajectory["train_loss"][-1]
    cut = attnsim.simulate({**cfg, "log_every": 7}).trajectory["train_loss"][-1]
    assert cut == whole
    run = Config(**cfg)
    problem_cfg = {**cfg, "engine": "dense"}
    r = attnsim.simulate(problem_cfg)
    seg = r.problem.stepper(Config(**problem_cfg), np.zeros(cfg["n"] * cfg["T"]))
    seg.advance(0, 30)
    snap = seg.snapshot()
    seg.advance(30, 30)
    after = seg.observe().loss
    seg.restore(snap)
    seg.advance(30, 30)
    assert seg.observe().loss == after and run.optimizer == "adam"


@pytest.mark.parametrize(
    "over, match",
    [
        ({"engine": "reduced"}, "engine: reduced is not exact for optimizer=adam"),
        ({"engine": "implicit", "init_W": "gaussian"}, "engine: implicit is not exact for optimizer=adam"),
        ({"d": 20000}, "d: optimizer=adam runs in the dense engine"),
        ({"integrator": "flow"}, "optimizer: adam is a rule for discrete steps"),
        ({"optimizer": "gd", "adam_beta1": 0.5}, "adam_beta1: applies to optimizer=adam"),
        ({"adam_beta2": 1.0}, r"adam_beta2: must be in \[0, 1\)"),
        ({"adam_eps": 0.0}, "adam_eps: must be > 0"),
        ({"weight_decay": -1.0}, "weight_decay: must be >= 0"),
    ],
)
def test_adam_is_refused_in_one_line_where_it_is_not_exact_or_its_keys_are_wrong(over, match):
    with pytest.raises(ConfigError, match=match):
        attnsim.simulate({"optimizer": "adam", "steps": 2, **over})


def test_the_adam_keys_at_their_defaults_keep_every_record_key():
    cfg = Config(d=300)
    old = {k: v for k, v in cfg.to_dict().items() if k not in ("optimizer", *ADAM_KEYS)}
    assert record_key(cfg) == _key_of(old, None) and Config().hash() == cfg.replace(d=2000).hash()


@pytest.mark.parametrize("optimizer", ["gd", "normalized"])
def test_p_alone_in_the_x_w_form_reads_its_tokens_once_and_equals_the_dense_engine(optimizer):
    """train = p: logits and p's gradient in one pass over B = X W(0), no K = X X^T, however
    close the log points (nothing to rebuild at a log point); the same run as the dense engine
    and as the W form's steps."""
    cfg = {"train": "p", "init_W": "identity", "d": 300, "steps": 2000, "log_every": 1000, "lr": 0.01,
           "optimizer": optimizer, "limit": True}  # fmt: skip
    a = attnsim.simulate({**cfg, "engine": "reduced"})
    b = attnsim.simulate({**cfg, "engine": "dense", "log_every": 100})
    assert a.engine["gd_state"] == b.engine["gd_state"] == "X W (n*T x r)"
    np.testing.assert_allclose(a.trajectory["train_loss"], b.trajectory["train_loss"][::10], rtol=1e-12)
    assert a.trajectory["W_dev"][-1] == 0.0 and a.limit["cos"] == pytest.approx(b.limit["cos"], abs=1e-12)
    rng = np.random.default_rng(3)
    n, T, k = 6, 4, 30
    X, y = rng.standard_normal((n * T, k)), np.where(np.arange(n) < 3, 1.0, -1.0)
    arrays = ModelArrays(X, y, rng.standard_normal((k, k)), np.zeros(k), 0.1 * rng.standard_normal(k), T,
                         0.05, ("p",), "logistic", np.zeros(n * T))  # fmt: skip
    w_form, xw_form = Segment(arrays, optimizer=optimizer), make_segment(arrays, 1.0, optimizer=optimizer)
    assert isinstance(xw_form, SegmentXW)
    for seg in (w_form, xw_form):
        seg.advance(0, 500)
    assert xw_form.observe().loss == pytest.approx(w_form.observe().loss, rel=1e-12)
    np.testing.assert_allclose(xw_form.p, w_form.p, rtol=1e-11)


def _one_direction_data(tmp_path: Path, P_rows: int = 6, d: int = 5) -> tuple[Path, np.ndarray]:
    """Two tokens per sample whose difference is one vector a in every sample, W = I fixed:
    every gradient of p is a multiple of a (dL/dp = sum_i c_i1 (x_i1 - x_i2)), so mirror
    descent's dual variable never leaves a's line."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal(d)
    B = rng.standard_normal((P_rows, d))
    X = np.stack([B + a, B], axis=1)  # (n, 2, d): token 1 - token 2 = a
    y = np.where(np.arange(P_rows) % 2 == 0, 1.0, -1.0)
    nu = rng.standard_normal(d)
    path = tmp_path / "one_direction.npz"
    np.savez(path, X=X, y=y, nu=nu, W0=np.eye(d), p0=np.zeros(d))
    return path, a


@pytest.mark.parametrize("P", [1.5, 3.0, 4.0])
def test_mirror_descent_moves_p_along_the_lp_max_margin_direction_at_every_step(tmp_path, P):
    """The closed form: with every gradient of p along a, the dual variable stays on a's line and
    p / |p| = +-sign(a) |a|^(1/(P-1)) normalized (the l_P max-margin direction of the constraint
    a . p >= 1, by Hölder) after every step; and P = 2 is gradient descent."""
    path, a = _one_direction_data(tmp_path)
    keys = {"optimizer": "mirror", "mirror_p": P, "train": "p", "engine": "dense", "lr": 0.3,
            "n_weak_aligned": 0, "n_weak_opposite": 0, "clean_twin": False}  # fmt: skip
    direction = np.sign(a) * np.abs(a) ** (1.0 / (P - 1.0))
    direction /= np.linalg.norm(direction)
    for steps in (1, 7, 300):
        res = attnsim.simulate({**keys, "steps": steps}, data=path)
        p = res.state["p"]
        cos = p @ direction / np.linalg.norm(p)
        assert abs(abs(cos) - 1.0) < 1e-12, (steps, cos)
    assert not np.allclose(np.abs(direction), np.abs(a) / np.linalg.norm(a))  # not GD's direction
    gd = attnsim.simulate({**keys, "steps": 50, "optimizer": "gd", "mirror_p": 3.0}, data=path)
    two = attnsim.simulate({**keys, "steps": 50, "mirror_p": 2.0}, data=path)
    np.testing.assert_allclose(two.state["p"], gd.state["p"], rtol=1e-12, atol=1e-15)


def test_mirror_descent_is_refused_where_it_cannot_run():
    for keys, match in (
        ({"optimizer": "mirror", "engine": "reduced"}, "engine: reduced is not exact for optimizer=mirror"),
        (
            {"optimizer": "mirror", "model": "encoder"},
            "optimizer: model=encoder does not run optimizer mirror",
        ),
        ({"optimizer": "mirror", "mirror_p": 1.0}, r"mirror_p: must be in \[1.01, 100\]"),
        ({"mirror_p": 4.0}, "mirror_p: applies to optimizer=mirror"),
        ({"optimizer": "mirror", "integrator": "flow"}, "optimizer: mirror is a rule for discrete steps"),
    ):
        with pytest.raises(ConfigError, match=match):
            Config(**keys)
