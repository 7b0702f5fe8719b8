"""The one-layer Transformer encoder: parity with the official run, gradients
against central differences of the all-positions reference, the CLS-path
forward against the reference, initialization, refusals and the run path."""

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.special import ndtr

import attnsim
from attnsim.cli import main
from attnsim.config import Config
from attnsim.metrics import regime
from attnsim.models.base import Outcome, finite_difference_errors
from attnsim.models.encoder import kernels, linalg
from attnsim.models.encoder import passes as K
from attnsim.models.encoder.model import EncoderStepper
from attnsim.models.encoder.params import init_params, param_shapes
from attnsim.models.encoder.reference import encoder_forward, encoder_loss, random_encoder
from attnsim.registry import ENCODER_ARRAYS
from attnsim.sweep.spec import read_spec

SMALL = {"model": "encoder", "n": 6, "T": 4, "d": 16, "mlp_dim": 8, "steps": 20, "log_every": 5, "test_n": 50}


def test_encoder_parity_with_the_official_run(encoder_fixture_path, tmp_path):
    f = np.load(encoder_fixture_path)
    sets = ["model=encoder", "mlp_dim=32", "lr=0.02", "steps=300", "log_every=1"]
    args = [
        "run",
        *sum((["--set", s] for s in sets), []),
        "--data",
        str(encoder_fixture_path),
        "--save-scores",
    ]
    args += ["--out", str(tmp_path / "r"), "--quiet"]
    assert main(args) == 0
    tr = np.load(tmp_path / "r" / "trajectory.npz")
    loss = tr["train_loss"]
    np.testing.assert_allclose(loss[:-1], f["loss_before_step"], rtol=1e-9)
    assert loss[-1] == pytest.approx(float(f["loss_final"]), rel=1e-9)
    np.testing.assert_allclose(tr["scores"][:-1], f["scores_before_step"], atol=1e-9)
    np.testing.assert_allclose(tr["scores"][-1], f["scores_final"], atol=1e-9)
    meta = json.loads((tmp_path / "r" / "result.json").read_text())
    assert meta["config"]["mlp_dim"] == 32 and meta["engine"]["used"] == "dense"


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_cls_path_forward_equals_the_all_positions_reference(skip, seed):
    X, y, P = random_encoder(seed, n=5, T=4, d=7, m=6)
    n, T, d = X.shape
    cache = K.forward(np.ascontiguousarray(X.reshape(n * T, d)), n, T, P, skip)
    ref = encoder_forward(X, P, skip)
    np.testing.assert_allclose(cache["f"], ref["f"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(cache["a"], ref["attn"][:, 0, :], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("loss", ["logistic", "linear"])
@pytest.mark.parametrize("skip", [True, False])
def test_encoder_gradients_match_central_differences_per_block(skip, loss):
    X, y, P = random_encoder(3)
    names = list(ENCODER_ARRAYS)
    errs = finite_difference_errors(
        lambda *v: encoder_loss(X, y, dict(zip(names, v)), skip, loss),
        lambda *v: [K.loss_and_grads(X, y, dict(zip(names, v)), skip, loss)[1][k] for k in names],
        {k: P[k] for k in names},
    )
    assert set(errs) == set(names)
    for block, e in errs.items():
        assert e["rel"] < 1e-6 and e["mean_abs"] < 1e-8, (block, e)


def test_check_grad_command_for_the_encoder(capsys):
    assert main(["check-grad", "--set", "model=encoder"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert float(last.split()[-1]) < 1e-6


def test_in_place_updates_equal_dense_gradient_steps():
    X, y, P = random_encoder(4)
    n, T, d = X.shape
    X2 = np.ascontiguousarray(X.reshape(n * T, d))
    cache = K.forward(X2, n, T, P, True)
    _, df = K.loss_coefficients(cache["f"], y, "logistic")
    G = K.backward(X2, n, T, P, True, cache, df)
    dense = linalg.dense_grads(G)
    Q = {k: v.copy() for k, v in P.items()}
    linalg.update(Q, G, 0.3)
    for k in P:
        np.testing.assert_allclose(Q[k], P[k] - 0.3 * dense[k], rtol=1e-13, atol=1e-15, err_msg=k)


def _steps_without_holding(X, y, P, lr, steps):
    """GD with every update applied at once (no held W_q, W_k updates)."""
    n, T, d = X.shape
    X2 = np.ascontiguousarray(X.reshape(n * T, d))
    P = {k: v.copy() for k, v in P.items()}
    for _ in range(steps):
        cache = K.forward(X2, n, T, P, True)
        _, df = K.loss_coefficients(cache["f"], y, "logistic")
        K.backward(X2, n, T, P, True, cache, df, lr)
    return P


def test_held_query_and_key_updates_equal_updating_at_every_step():
    X, y, P = random_encoder(5, n=6, T=4, d=9, m=7)
    steps = 2 * linalg.Held(9).cap + 5  # applied twice on the way, five rows held at the end
    stepper = EncoderStepper(X, y, P, 0.2, True, "logistic", np.zeros((6, 4)))
    assert stepper.advance(0, steps) == (Outcome.FINISHED, steps) and stepper.held.k == 5
    want = _steps_without_holding(X, y, P, 0.2, steps)
    got = stepper.state()
    assert stepper.held.k == 0  # reading the parameters applies what was held
    for k in P:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-14, err_msg=k)


def test_a_restored_snapshot_forgets_the_held_updates():
    X, y, P = random_encoder(6, n=6, T=4, d=9, m=7)
    stepper = EncoderStepper(X, y, P, 0.2, True, "logistic", np.zeros((6, 4)))
    stepper.advance(0, 3)
    snap = stepper.snapshot()
    stepper.advance(3, 4)
    stepper.restore(snap)
    stepper.advance(3, 4)
    want = _steps_without_holding(X, y, P, 0.2, 7)
    for k, v in stepper.state().items():
        np.testing.assert_allclose(v, want[k], rtol=1e-12, atol=1e-14, err_msg=k)


def test_gelu_is_the_exact_one_in_both_tails():
    r = np.linspace(-30.0, 30.0, 6000).reshape(60, -1)
    g, dg = kernels.gelu(r)
    cdf, pdf = ndtr(r), np.exp(-0.5 * r * r) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(g, r * cdf, rtol=1e-12, atol=1e-300)  # libm's erfc, cephes: 2e-13 apart
    np.testing.assert_allclose(dg, cdf + r * pdf, rtol=1e-12, atol=1e-300)


def test_pytorch_default_initialization():
    cfg = Config(model="encoder", d=300, mlp_dim=200, init_cls_scale=0.5)
    P = init_params(cfg, np.random.default_rng(0))
    assert {k: v.shape for k, v in P.items()} == param_shapes(300, 200)
    for name, fan_in in (("W_qkv", 300), ("W1", 300), ("b1", 300), ("W2", 200), ("b2", 200), ("head_w", 300)):
        bound = 1 / np.sqrt(fan_in)
        assert np.abs(P[name]).max() <= bound and np.abs(P[name]).max() > 0.9 * bound, name
        assert P[name].std() == pytest.approx(bound / np.sqrt(3), rel=0.15), name
    assert P["cls"].std() == pytest.approx(0.5, rel=0.15)
    for g in ("ln1_g", "ln2_g", "lnf_g"):
        assert np.all(P[g] == 1) and np.all(P[g.replace("_g", "_b")] == 0)


@pytest.mark.parametrize("shape", [(7,), (300, 300), (5, 1, 3)])
def test_uniform_draws_in_two_halves_are_rng_uniforms_and_leave_the_stream_where_it_does(shape):
    from attnsim.init import uniform_fill

    a, b = np.random.default_rng(4), np.random.default_rng(4)
    np.testing.assert_array_equal(uniform_fill(a, -0.3, 0.3, np.empty(shape)), b.uniform(-0.3, 0.3, shape))
    assert a.random() == b.random()


def test_the_first_stepper_trains_p0_itself_and_later_readers_get_it_drawn_again():
    from attnsim.data.dataset import make_streams
    from attnsim.data.synthetic import generate
    from attnsim.models.encoder.model import EncoderProblem

    cfg = Config(model="encoder", n=4, T=3, d=12, mlp_dim=8, noise_rate=0.0)
    streams = make_streams(2)
    pb = EncoderProblem(cfg, generate(cfg, streams), streams, "test")
    before = {k: v.copy() for k, v in pb.P0.items()}
    stepper = pb.stepper(cfg, np.zeros((4, 3)))
    stepper.advance(0, 3)
    for k, v in pb.P0.items():  # drawn again, not the trained arrays
        np.testing.assert_array_equal(v, before[k], err_msg=k)
    assert any(not np.array_equal(stepper.state()[k], before[k]) for k in before)


def test_encoder_run_records_scores_tests_and_regime(tmp_path):
    r = attnsim.simulate(SMALL, save_scores=True)
    tr, f = r.trajectory, r.final
    assert r.engine["used"] == "dense" and r.config["test_n"] == 50
    assert np.isfinite(f["test_loss"]) and 0 <= f["test_acc"] <= 1 and np.isnan(f["pop_error"])
    assert "finite test set of 50" in r.data["population"]
    assert f["regime"] == regime(
        f["n_clean"], f["n_fitted_clean"], f["n_noisy"], f["n_fitted_noisy"], f["excess_error"], 0.05
    )  # the counts and the test error decide it
    assert f["excess_error_se"] > 0 and f["bayes_error"] < 1e-6  # a finite test set: a binomial se
    assert 0 < f["score_cls"] < 1 and np.all(tr["scores"].sum(axis=2) < 1)  # the CLS token takes the rest
    np.testing.assert_allclose(tr["scores"].sum(axis=2) + tr["score_cls"][:, None], 1.0, atol=0.5)
    assert tr["scores"].shape == (len(tr["step"]), 6, 4)
    r.save(tmp_path / "r")
    assert attnsim.load(tmp_path / "r").final["regime"] == f["regime"]
    assert Config(model="encoder").test_n == 1000 and Config().test_n == 0


@pytest.mark.parametrize(
    "over,needle",
    [({"engine": "reduced"}, "engine:"), ({"engine": "implicit"}, "engine:"),
     ({"integrator": "flow"}, "integrator:"), ({"train": "p"}, "train:"), ({"init_W": "gaussian"}, "init_W:"),
     ({"init_p": "gaussian"}, "init_p:"), ({"limit": True}, "limit:")],
)  # fmt: skip
def test_keys_that_cannot_apply_to_the_encoder_exit_2(over, needle, capsys, tmp_path):
    args = [
        "run",
        "--set",
        "model=encoder",
        *sum((["--set", f"{k}={str(v).lower()}"] for k, v in over.items()), []),
    ]
    assert main([*args, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_encoder_data_with_a_mismatched_parameter_names_it(encoder_fixture_path, tmp_path, capsys):
    f = dict(np.load(encoder_fixture_path))
    f["W2"] = f["W2"][:, :5]  # (d, m) with the wrong m
    path = tmp_path / "bad.npz"
    np.savez(path, **f)
    assert main(["run", "--set", "model=encoder", "--data", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "'W2'" in err and "expected (64, 32)" in err


def test_encoder_data_draws_the_parameters_it_lacks(encoder_fixture_path, tmp_path):
    f = dict(np.load(encoder_fixture_path))
    for k in ("W1", "b1", "W2", "b2", "cls"):
        f.pop(k)
    path = tmp_path / "partial.npz"
    np.savez(path, **f)
    with pytest.warns(UserWarning, match="test_n .ignored: the data file's X_test decides"):
        r = attnsim.simulate({"model": "encoder", "mlp_dim": 16, "steps": 5, "test_n": 20}, data=path)
    assert np.isfinite(r.final["train_loss"]) and r.config["mlp_dim"] == 16


def test_encoder_sweep_and_scores_plot(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('[sweep]\nname = "enc"\n[base]\nmodel = "encoder"\nn = 6\nT = 4\nd = 16\nmlp_dim = 8\n'
                     'steps = 10\ntest_n = 20\n[grid]\nsignal_norm = [3.0, 6.0]\n')  # fmt: skip
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "sw"), "--workers", "1"]) == 0
    csv = (tmp_path / "sw" / "enc" / "records.csv").read_text()
    assert csv.count("\n") == 3 and "score_cls" in csv
    args = ["run", *sum((["--set", f"{k}={v}"] for k, v in SMALL.items()), []), "--plot", "scores"]
    assert main([*args, "--out", str(tmp_path / "r"), "--quiet"]) == 0
    assert (tmp_path / "r" / "scores.png").stat().st_size > 10_000
    assert Path(tmp_path / "r" / "result.json").exists()


def test_the_default_test_set_follows_a_change_of_model(tmp_path):
    assert Config().replace(model="encoder").test_n == 1000
    assert Config(model="encoder").replace(model="attention").test_n == 0
    assert Config(test_n=7).replace(model="encoder").test_n == 7
    sweep = tmp_path / "s.toml"
    sweep.write_text('[sweep]\nname = "enc"\n[base]\nn = 6\nT = 4\nd = 16\nmlp_dim = 8\nsteps = 2\n'
                     '[[point]]\nmodel = "encoder"\n')  # fmt: skip
    (cfg,) = read_spec(sweep).points()
    assert cfg.model == "encoder" and cfg.test_n == 1000


@pytest.mark.parametrize("optimizer, kind", [("adam", "adamw"), ("normalized", "normalized")])
def test_encoder_optimizers_follow_torch(encoder_fixture_path, optimizer, kind):
    """AdamW (torch.optim.AdamW over model.parameters(), its defaults) and normalized GD
    (lr g / ||g||_F per tensor) on the official encoder in float64 against torch's own
    loops (tests/data/encoder_optimizers_small.npz, recorded by
    tests/data/record_encoder_optimizers.py): the loss before every step, the final
    loss and the CLS query's final scores."""
    f = np.load(Path(encoder_fixture_path).parent / "encoder_optimizers_small.npz")
    keys = {"model": "encoder", "mlp_dim": 32, "steps": 300, "log_every": 1, "optimizer": optimizer}
    r = attnsim.simulate({**keys, "lr": float(f[f"{kind}_lr"])}, data=encoder_fixture_path, save_scores=True)
    loss = r.trajectory["train_loss"]
    rel = np.max(np.abs(loss[:-1] - f[f"{kind}_loss_before_step"]) / f[f"{kind}_loss_before_step"])
    print(f"{kind}: max relative loss difference {rel:.3g} over 300 steps")
    assert rel < 1e-9
    assert loss[-1] == pytest.approx(float(f[f"{kind}_loss_final"]), rel=1e-9)
    np.testing.assert_allclose(r.trajectory["scores"][-1], f[f"{kind}_scores_final"], atol=1e-9)


def test_encoder_adamw_snapshot_keeps_its_moments():
    """A restored AdamW stepper continues exactly as one that was never interrupted."""
    X, y, P = random_encoder(0, n=4, T=3, d=6, m=5)
    rel = np.zeros((4, 3))
    from attnsim import registry
    from attnsim.config import Config

    adam = lambda: registry.make_optimizer(Config(model="encoder", optimizer="adam", lr=0.01))  # noqa: E731
    a = EncoderStepper(X, y, P, 0.01, True, "logistic", rel, optimizer=adam())
    b = EncoderStepper(X, y, P, 0.01, True, "logistic", rel, optimizer=adam())
    a.advance(0, 5)
    snap = a.snapshot()
    a.advance(5, 5)
    b.advance(0, 3)
    b.restore(snap)
    b.advance(5, 5)
    for k in a.P:
        np.testing.assert_array_equal(a.state()[k], b.state()[k])
