"""The precision twin (SPEC §16) against torch's own float32 and bfloat16 loops
(tests/data/precision_small.npz, recorded by tests/data/record_precision.py)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

import attnsim
from attnsim.config import ConfigError
from attnsim.models.attention.precision import PrecisionTwin, to_format
from attnsim.models.attention.precision_kernels import _bf16

DATA = Path(__file__).resolve().parent / "data"

FIX = DATA / "precision_small.npz"


@pytest.fixture(scope="module")
def fix():
    return dict(np.load(FIX))


def _twin(f, fmt, lr, graph="official", adam=None, p_alone=False, attention="softmax"):
    X = f["X"]
    n, T, d = X.shape
    W0 = np.eye(d) if p_alone else f["W0"]
    train = ("p",) if p_alone else ("W", "p")
    return PrecisionTwin(
        X.reshape(n * T, d),
        f["y"],
        W0,
        f["p0"],
        f["nu"],
        T,
        np.zeros(n * T),
        train,
        lr,
        fmt,
        adam=adam,
        graph=graph,
        attention=attention,
    )


def _losses(twin, steps):
    out = np.empty(steps)
    for k in range(steps):
        out[k] = twin.observe().loss
        twin.advance(k, 1)
    return out


def _rel(a, b):
    return float(np.max(np.abs(a - b) / np.abs(b)))


@pytest.mark.parametrize("graph", ["official", "qform"])
def test_bfloat16_twin_is_torch_bfloat16_loop_bit_for_bit(fix, graph):
    torch_loss = fix[f"{graph}_bfloat16_loss_before_step"]
    ours = _losses(_twin(fix, "bfloat16", 0.05, graph), torch_loss.size)
    assert np.array_equal(ours, torch_loss), (
        f"{np.sum(ours != torch_loss)} steps differ, max {_rel(ours, torch_loss)}"
    )


def test_stablemax_bfloat16_twin_is_torch_bit_for_bit_to_its_nan(fix):
    """Prieto et al.'s StableMax in torch's bfloat16: the same losses at every step, and the
    same NaN: a logit of exactly 1 makes the discarded branch 1 / (1 - z + 1e-30) of
    torch.where overflow when squared in its backward (0 * inf). The twin stops there."""
    torch_loss = fix["stablemax_qform_bfloat16_loss_before_step"]
    nan_at = int(np.argmax(~np.isfinite(torch_loss)))
    assert nan_at > 0
    twin = _twin(fix, "bfloat16", 0.05, "qform", attention="stablemax")
    ours = _losses(twin, nan_at)
    assert np.array_equal(ours, torch_loss[:nan_at]), f"{np.sum(ours != torch_loss[:nan_at])} steps differ"
    assert not math.isfinite(twin.observe().loss)
    twin.advance(nan_at, 1)
    assert f"StableMax's gradient at step {nan_at - 1} is NaN" in twin.detail


def test_stablemax_float32_twin_and_float64_run_follow_torch(fix):
    """StableMax in float32 against torch's float32 loop, and the exact run's StableMax
    kernels against torch's float64 loop (an independent check of their gradient,
    c = w (u - f) / (1 + |z|)); measured 2e-7 and 1e-15."""
    torch32 = fix["stablemax_qform_float32_loss_before_step"]
    ours = _losses(_twin(fix, "float32", 0.05, "qform", attention="stablemax"), torch32.size)
    assert _rel(ours, torch32) < 2e-6
    torch64 = fix["stablemax_float64_loss_before_step"]
    from attnsim.models.attention.steppers import ModelArrays, Segment

    X = fix["X"]
    n, T, d = X.shape
    arrays = ModelArrays(
        X.reshape(n * T, d),
        fix["y"],
        fix["W0"],
        fix["p0"],
        fix["nu"],
        T,
        0.05,
        ("W", "p"),
        "logistic",
        np.zeros(n * T),
        "stablemax",
    )
    seg = Segment(arrays)
    exact = np.empty(torch64.size)
    for k in range(torch64.size):
        exact[k] = seg.observe().loss
        seg.advance(k, 1)
    assert _rel(exact, torch64) < 1e-12


@pytest.mark.parametrize("graph", ["official", "qform"])
def test_float32_twin_follows_torch_float32_loop_to_its_rounding(fix, graph):
    """Torch's sgemm sums in another order than OpenBLAS's: the per-step losses agree to a
    few float32 units (measured 2.7e-7 relative at most over 1000 steps)."""
    torch_loss = fix[f"{graph}_float32_loss_before_step"]
    ours = _losses(_twin(fix, "float32", 0.05, graph), torch_loss.size)
    assert ours[0] == torch_loss[0]
    assert _rel(ours, torch_loss) < 2e-6


def test_float32_parity_through_a_data_file_and_float64_beside_it(fix, fixture_path):
    """``attnsim run --data`` with the twin: the twin's train loss against torch's
    float32 loop, and the exact float64 run against the same loop. Over these 1000 steps
    the two are alike (measured 2.7e-7 and 1.9e-7: float32's rounding of the loss itself,
    2^-24 relative, and the order of sgemm's sums): what float32 changes here is not the
    trajectory but where it can go (the saturation tests below)."""
    torch_loss = fix["official_float32_loss_before_step"]
    cfg = {
        "steps": 1000,
        "lr": 0.05,
        "train": "W,p",
        "log_every": 1,
        "precision_twin": "float32",
        "precision_graph": "official",
        "pop_log_points": 2,
        "clean_twin": False,
    }
    r = attnsim.simulate(cfg, data=fixture_path)
    twin = r.trajectory["twin_train_loss"][:1000]
    exact = r.trajectory["train_loss"][:1000]
    twin_diff, exact_diff = _rel(twin, torch_loss), _rel(exact, torch_loss)
    print(f"float32 twin vs torch float32: {twin_diff:.3g}; float64 run vs torch float32: {exact_diff:.3g}")
    assert twin_diff < 2e-6
    assert exact_diff < 2e-6
    assert r.precision["dtype"] == "float32" and r.precision["departure_step"] is None


@pytest.mark.parametrize("fmt, tol", [("float32", 1e-5), ("bfloat16", 2.0**-6)])
def test_adamw_twin_follows_torch_adamw(fix, fmt, tol):
    """torch's AVX-512 float32 sqrt is not correctly rounded (1 ulp off in about 20 % of
    entries, measured), so AdamW's steps agree to rounding, not bits; its normalized
    steps make the difference grow (measured 2.3e-7 in float32, 4e-3 = half a bfloat16
    unit in bfloat16, over 300 steps)."""
    torch_loss = fix[f"adamw_{fmt}_loss_before_step"]
    ours = _losses(_twin(fix, fmt, 0.01, adam=(0.9, 0.999, 1e-8, 0.01)), torch_loss.size)
    assert _rel(ours, torch_loss) < tol


@pytest.mark.parametrize("fmt", ["float32", "bfloat16"])
def test_saturation_step_is_where_torch_softmax_first_returns_one(fix, fmt):
    first = int(fix[f"sat_{fmt}_first_saturated"])
    assert 0 < first < 10_000
    twin = _twin(fix, fmt, float(fix[f"sat_{fmt}_lr"]), p_alone=True)
    _losses(twin, first + 1)
    assert twin.first_saturated == first
    ours = _losses(_twin(fix, fmt, float(fix[f"sat_{fmt}_lr"]), p_alone=True), first + 1)
    assert _rel(ours, fix[f"sat_{fmt}_loss_before_step"]) < 1e-6  # float32: one unit apart at the last


def test_float32_adamw_saturates_where_torch_does(fix):
    """Where float32 AdamW saturates every score (d = 200, lr 0.001): torch's own loop
    and the twin first return a score of exactly 1 at the same step (6762, recorded)."""
    from attnsim.config import Config
    from attnsim.data.dataset import make_streams
    from attnsim.models.attention import engines
    from attnsim.runtime.workspace import Workspace

    cfg = Config(d=200, optimizer="adam", lr=0.001)
    pb, _ = engines.build(cfg, None, make_streams(cfg.seed), "dense", "test", Workspace())
    rel = np.zeros(pb.X2.shape[0])
    adam = (0.9, 0.999, 1e-8, 0.01)
    twin = PrecisionTwin(pb.X2, pb.y, pb.W0, pb.p0, pb.nu0, pb.T, rel, ("W", "p"), cfg.lr, "float32", adam)
    torch_loss = fix["adamw_d200_loss_every_100"]
    ours = np.empty(torch_loss.size)
    for j in range(torch_loss.size):
        ours[j] = twin.observe().loss
        twin.advance(100 * j, 100)
    assert twin.first_saturated == int(fix["adamw_d200_first_saturated"]) == 6762
    assert _rel(ours, torch_loss) < 1e-5  # measured 2.6e-7


def test_float64_twin_is_the_run_in_another_order_and_changes_nothing():
    """A float64 twin follows torch's order of operations, not the run's kernels (which
    centre the softmax and associate x (W p)): they agree to float64 rounding, not bits
    (measured 1e-15 relative). The twin never changes the run: every array and number of
    the run is bit for bit the one without it."""
    cfg = {"d": 64, "steps": 300, "log_every": 10, "pop_log_points": 4}
    plain = attnsim.simulate(cfg)
    r = attnsim.simulate({**cfg, "precision_twin": "float64", "engine": "dense"})
    dense = attnsim.simulate({**cfg, "engine": "dense"})
    assert _rel(r.trajectory["twin_train_loss"], r.trajectory["train_loss"]) < 1e-12
    assert np.max(r.trajectory["twin_q_rel_dev"]) < 1e-10
    for key, v in dense.trajectory.items():
        np.testing.assert_array_equal(r.trajectory[key], v, err_msg=key)
    assert {k: v for k, v in r.final.items() if v == v} == {k: v for k, v in dense.final.items() if v == v}
    assert plain.engine["used"] == "dense"  # d = 64 < n T + 2: the plain run was dense already
    assert r.precision["regime"] == r.final["regime"]


def test_twin_of_a_reduced_run_is_the_twin_of_the_dense_run():
    """The reduced run's twin is built from its tokens lifted to d coordinates (X2 Q^T:
    the dense run's tokens to float64 rounding, then rounded to float32 as they are)."""
    cfg = {"d": 200, "steps": 400, "log_every": 20, "pop_log_points": 3, "precision_twin": "float32"}
    reduced, dense = attnsim.simulate(cfg), attnsim.simulate({**cfg, "engine": "dense"})
    assert reduced.engine["used"] == "reduced" and dense.engine["used"] == "dense"
    assert _rel(reduced.trajectory["twin_train_loss"], dense.trajectory["twin_train_loss"]) < 1e-5
    assert np.max(reduced.trajectory["twin_q_rel_dev"]) < 1e-3  # float32 against float64, both lifted
    assert reduced.precision["regime"] == dense.precision["regime"]


def _bf16_reference(x):
    """Round float32 values to 8 significant bits, ties to even, in float64 arithmetic."""
    out = np.empty_like(x, dtype=np.float64)
    for i, v in enumerate(x.astype(np.float64)):
        if not math.isfinite(v) or v == 0:
            out[i] = v
            continue
        m, e = math.frexp(v)
        out[i] = math.ldexp(np.rint(m * 256.0) / 256.0, e)
    return out


def test_bfloat16_rounding_against_a_float64_reference():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(20000) * np.exp(rng.uniform(-40, 40, 20000))).astype(np.float32)
    ties = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 2**-130, 3.3e38, np.inf, -np.inf], np.float32)
    x = np.concatenate([x, ties])
    got = x.copy()
    _bf16(got)
    ref = _bf16_reference(x)
    ref[np.abs(ref) > np.finfo(np.float32).max] = (
        np.sign(ref[np.abs(ref) > np.finfo(np.float32).max]) * np.inf
    )
    normal = np.abs(x) >= 2.0**-126  # subnormals keep 8 bits of the significand field, not 8 significant bits
    np.testing.assert_array_equal(got[normal], ref[normal].astype(np.float32))
    assert got[-7] == 1.0 and got[-6] == 1 + 2**-6  # ties to even
    nan = np.array([np.nan], np.float32)
    _bf16(nan)
    assert np.isnan(nan[0])
    assert to_format(np.array([1 + 2**-9]), "bfloat16")[0] == 1.0


@pytest.mark.parametrize(
    "keys, words",
    [
        ({"integrator": "flow"}, "integrator=gd"),
        ({"engine": "implicit"}, "implicit engine"),
        ({"optimizer": "normalized"}, "optimizer=gd or adam"),
        ({"loss": "linear"}, "loss=logistic"),
    ],
)
def test_twin_refuses_what_it_does_not_follow(keys, words):
    with pytest.raises(ConfigError, match=words):
        attnsim.Config(precision_twin="float32", **keys)


def test_graph_without_a_twin_is_refused():
    with pytest.raises(ConfigError, match="precision_graph"):
        attnsim.Config(precision_graph="official")


def test_the_twin_is_saved_loaded_summarized_and_plotted(tmp_path):
    """A frozen bfloat16 twin: its section and twin_ arrays survive a save and a load, the
    summary says where it stopped, and the run's plot draws it."""
    from attnsim.report import format_summary
    from attnsim.report_figures import plot_result
    from attnsim.results import load

    with pytest.warns(UserWarning, match="precision twin .bfloat16.: stops moving after step 1415"):
        r = attnsim.simulate({"d": 200, "steps": 3000, "log_scale": "log", "precision_twin": "bfloat16"})
    pr = r.precision
    assert pr["stopped_at"] == 1415 and pr["status"] == "frozen"  # absorbed in the parameters
    assert pr["first_saturated_step"] is None and pr["saturated_fraction"] == 0.0
    assert any("stops moving after step 1415" in w for w in r.warnings)
    r.save(tmp_path / "run")
    back = load(tmp_path / "run")
    assert back.precision == json_like(pr)
    for key in ("twin_train_loss", "twin_pop_error", "twin_saturated_fraction", "twin_q_rel_dev"):
        np.testing.assert_array_equal(back.trajectory[key], r.trajectory[key])
    text = format_summary(back)
    assert "precision twin (bfloat16):" in text and "stops moving after step 1415" in text
    plot_result(back, "scores", tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 10_000


def json_like(d: dict) -> dict:
    import json

    from attnsim.results import json_safe

    return json.loads(json.dumps(json_safe(d)))


def test_memory_estimate_counts_the_twin_beside_each_engine():
    from attnsim.models.attention.plan import memory_estimate

    for engine in ("dense", "reduced"):
        what = [w for _, w, _ in memory_estimate(attnsim.Config(d=200, precision_twin="float32"), engine)]
        assert any("precision twin" in w for w in what)
        assert any(("bases Q" if engine == "reduced" else "W, W(0) and the update") in w for w in what)


# -- the encoder's twin (tests/data/encoder_optimizers_small.npz, recorded by
# tests/data/record_encoder_optimizers.py: the official encoder in float32 and bfloat16)

ENC_NAMES = ("cls", "ln1_g", "ln1_b", "W_qkv", "ln2_g", "ln2_b", "W1", "b1", "W2", "b2")
ENC_NAMES += ("lnf_g", "lnf_b", "head_w", "head_b")


@pytest.mark.parametrize(
    "run, fmt, adam, tol",
    [
        ("sgd_float32", "float32", None, 1e-5),
        ("adamw_float32", "float32", (0.9, 0.999, 1e-8, 0.01), 1e-4),
        ("sgd_bfloat16", "bfloat16", None, 2.0**-5),
    ],
)
def test_encoder_twin_follows_torch(encoder_fixture_path, run, fmt, adam, tol):
    """The encoder's twin against the official encoder with every tensor in float32 or
    bfloat16, 300 steps: the same first loss bit for bit; then float32 to its rounding
    (measured 1.5e-6 for SGD, the float64 run against the same loop 1.2e-6; AdamW 1.7e-5,
    the float64 run 5.1e-5) and bfloat16 bit for bit for 14 steps and within a few units
    of bfloat16 after (measured 1.1 %): torch's LayerNorm and softmax sum inside in another
    order than the twin, which rounds their results, not their internals, as torch does."""
    from attnsim.models.encoder.precision import EncoderTwin

    f = dict(np.load(encoder_fixture_path))
    ref = np.load(DATA / "encoder_optimizers_small.npz")[f"{run}_loss_before_step"]
    n, T, _ = f["X"].shape
    lr = float(np.load(DATA / "encoder_optimizers_small.npz")[f"{run}_lr"])
    twin = EncoderTwin(
        f["X"], f["y"], {k: f[k] for k in ENC_NAMES}, lr, True, fmt, np.zeros((n, T)), adam=adam
    )
    ours = _losses(twin, ref.size)
    assert ours[0] == ref[0]
    if fmt == "bfloat16":
        assert np.array_equal(ours[:14], ref[:14])
    assert _rel(ours, ref) < tol


def test_encoder_twin_beside_the_run():
    """Through the run: the precision section and twin arrays; the run's own numbers are
    those of a run without a twin, bit for bit; a float64 twin (torch's graph) follows
    the run's CLS-path kernels to rounding."""
    keys = {"model": "encoder", "n": 8, "T": 4, "d": 16, "mlp_dim": 8, "steps": 60, "log_every": 5}
    keys |= {"test_n": 200, "lr": 0.05}
    plain = attnsim.simulate(keys)
    r = attnsim.simulate({**keys, "precision_twin": "float64"})
    np.testing.assert_array_equal(plain.trajectory["train_loss"], r.trajectory["train_loss"])
    np.testing.assert_allclose(r.trajectory["twin_train_loss"], r.trajectory["train_loss"], rtol=1e-12)
    assert r.precision["dtype"] == "float64" and r.precision["test_acc"] == r.final["test_acc"]
    low = attnsim.simulate({**keys, "precision_twin": "bfloat16", "optimizer": "adam", "lr": 0.001})
    assert low.precision["status"] in ("ok", "frozen") and "twin_saturated_fraction" in low.trajectory
    with pytest.raises(ConfigError, match="precision_twin"):
        attnsim.simulate({**keys, "precision_twin": "float32", "optimizer": "normalized"})


def test_twin_in_a_one_thread_process_trains_after_the_run_and_gives_the_same_numbers():
    """A sweep worker runs one thread (NUMBA_NUM_THREADS=1): its population metrics are computed
    on the thread that asks, so a twin stepping beside the run would share their buffers
    (seen: a population score of 4.8). There the twin trains after the run; every number is
    the two-thread process's."""
    import json
    import os
    import subprocess
    import sys

    code = (
        "import json, warnings; warnings.simplefilter('ignore'); import attnsim; "
        "r = attnsim.simulate({'d': 200, 'steps': 600, 'log_scale': 'log', 'log_points': 60, "
        "'precision_twin': 'float32', 'clean_twin': False}); "
        "print(json.dumps({k: r.trajectory[k].tolist() for k in ('pop_score_relevant', "
        "'twin_pop_score_relevant', 'twin_train_loss')}))"
    )
    out = []
    for one in (True, False):
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_NUM_THREADS"}
        if one:
            env["NUMBA_NUM_THREADS"] = "1"
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        out.append(json.loads(run.stdout.strip().splitlines()[-1]))
    for key in out[0]:
        np.testing.assert_array_equal(np.array(out[0][key], float), np.array(out[1][key], float), err_msg=key)


def test_the_float32_w_pass_rounds_each_update_once_as_torch_does():
    """The q-form's fused W pass updates W by w - lr (g p) in one rounding (a float32
    fused multiply-add), as torch's float32 ``W.add_(gW, alpha=-lr)`` does on CPU. Here the
    exact value 1 - lr (g p) lies just below the midpoint between 1 - 2**-24 and 1: torch
    gives 1 - 2**-24 (checked with torch 2.13), while rounding first to float64 lands on
    the midpoint and then, ties to even, on 1. Off such ties both agree (random W)."""
    from attnsim.models.attention.precision_kernels import _fused_w_step

    lr = np.float32((1 + 2**-12) * 2**-10)
    g = np.full(3, (1 - 4095 * 2**-24) * 2**-15, dtype=np.float32)
    W, p, gp = np.ones((3, 16), np.float32), np.ones(16, np.float32), np.empty(16, np.float32)
    assert _fused_w_step(W, g, p, gp, lr, False, gp) == W.size
    assert np.all(W == np.float32(1 - 2**-24))
    rng = np.random.default_rng(4)
    W = rng.standard_normal((40, 40)).astype(np.float32)
    g, p = (rng.standard_normal(40).astype(np.float32) for _ in range(2))
    lr = np.float32(0.005)
    want = (W.astype(np.float64) - np.float64(lr) * (g[:, None] * p[None, :]).astype(np.float64)).astype(
        np.float32
    )
    want_gp = np.zeros(40, np.float32)
    for a in range(40):  # row after row, in float32
        want_gp += W[a] * g[a]
    _fused_w_step(W, g, p, gp := np.empty(40, np.float32), lr, False, gp)
    assert np.array_equal(W, want) and np.array_equal(gp, want_gp)


def test_a_sweep_worker_trains_the_exact_run_once_for_both_twin_formats(monkeypatch):
    """With the workspace's kept run on (sweep workers), the second format's point trains
    its twin alone beside the exact run of the first: its result is a fresh run's, with
    its engine saying the run was shared; another config trains its own run."""
    from attnsim import training
    from attnsim.runtime.workspace import Workspace

    trained = []
    real_train = training.drive
    monkeypatch.setattr(
        training, "drive", lambda *a, **k: trained.append(k.get("quiet")) or real_train(*a, **k)
    )
    cfg = {"d": 200, "steps": 800, "log_scale": "log", "log_points": 20, "noise_rate": 0.2}
    ws = Workspace()
    ws.kept_run.enabled = True
    first = attnsim.simulate({**cfg, "precision_twin": "float32"}, workspace=ws)
    trained.clear()
    shared = attnsim.simulate({**cfg, "precision_twin": "bfloat16"}, workspace=ws)
    assert trained == [True]  # the twin alone
    fresh = attnsim.simulate({**cfg, "precision_twin": "bfloat16"}, workspace=Workspace())
    assert set(shared.trajectory) == set(fresh.trajectory)
    for k, v in fresh.trajectory.items():
        np.testing.assert_array_equal(shared.trajectory[k], v, err_msg=k)
    assert json.dumps(shared.final) == json.dumps(fresh.final)
    assert json.dumps(shared.precision) == json.dumps(fresh.precision)
    assert shared.theory == fresh.theory and shared.warnings == fresh.warnings
    assert "exact_run" not in first.engine and "float32 twin" in shared.engine["exact_run"]
    assert {k: v for k, v in shared.engine.items() if k != "exact_run"} == fresh.engine
    trained.clear()
    other = attnsim.simulate({**cfg, "precision_twin": "bfloat16", "signal_norm": 7.0}, workspace=ws)
    assert len(trained) > 1 and "exact_run" not in other.engine  # its own run, and its twin
