"""Real data (SPEC §14): the protocol's split, head and label flips on cases
with known answers, features files, the built-in digits end to end, the loader
without its extra, the protocol table, and the engine chosen by cost."""

import json
import socket
import sys

import numpy as np
import pytest

from attnsim.cli import main
from attnsim.config import Config
from attnsim.data import real as realdata
from attnsim.data.dataset import make_streams
from attnsim.experiments import real as protocol
from attnsim.models.attention.plan import choose_engine
from attnsim.run import simulate

SMALL = ["--set", "d=32", "--set", "steps=30", "--set", "log_every=10", "--quiet"]


def test_split_is_a_seeded_partition():
    rng = np.random.default_rng(3)
    s = realdata.split(50, 10, 15, rng)
    assert (s.pretrain.size, s.test.size, s.pool.size) == (10, 15, 25)
    assert sorted(np.concatenate([s.pretrain, s.test, s.pool]).tolist()) == list(range(50))
    again = realdata.split(50, 10, 15, np.random.default_rng(3))
    assert np.array_equal(s.pool, again.pool)
    with pytest.raises(realdata.DataError, match="cannot give"):
        realdata.split(20, 10, 10, rng)


def test_head_on_one_direction_solves_the_one_dimensional_problem():
    """Mean tokens y * a * e1: the head is c e1 with a sigma(-a c) = l2 c."""
    a, l2 = 0.7, 0.05
    y = np.array([1.0, -1.0, 1.0, -1.0, -1.0, 1.0])
    X = np.zeros((6, 3, 4))
    X[:, :, 0] = (y * a)[:, None] + np.array([0.3, -0.6, 0.3])  # token means: y a
    X[:, :, 2] = np.array([1.0, -2.0, 1.0])  # averages out
    nu = realdata.fit_head(X, y, l2)
    lo, hi = 0.0, 100.0
    for _ in range(200):
        c = 0.5 * (lo + hi)
        lo, hi = (c, hi) if a / (1 + np.exp(a * c)) > l2 * c else (lo, c)
    assert nu == pytest.approx([c, 0, 0, 0], abs=1e-6)


def test_head_equals_scikit_learn_logistic_regression():
    sk = pytest.importorskip("sklearn.linear_model")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((80, 5, 6))
    y = np.where(X.mean(axis=1) @ rng.standard_normal(6) + 0.3 * rng.standard_normal(80) > 0, 1.0, -1.0)
    nu = realdata.fit_head(X, y, realdata.HEAD_L2)
    ref = sk.LogisticRegression(
        C=1 / (realdata.HEAD_L2 * y.size), fit_intercept=False, tol=1e-12, max_iter=10_000
    )
    ref.fit(X.mean(axis=1), y)
    assert np.max(np.abs(nu - ref.coef_[0])) < 1e-5


@pytest.mark.parametrize("n, eta, flipped", [(20, 0.2, 4), (5, 0.1, 1), (7, 0.0, 0), (3, 0.5, 2)])
def test_symmetric_flips_count(n, eta, flipped):
    y = np.ones(n)
    assert np.count_nonzero(realdata.flip(y, eta, np.random.default_rng(1)) < 0) == flipped


def features_file(path, N=60, T=3, d=5, **extra):
    rng = np.random.default_rng(0)
    labels = np.where(np.arange(N) % 2 == 0, 1.0, -1.0)
    X = rng.standard_normal((N, T, d))
    X[:, 0, 0] += 2 * labels  # the first token carries the label
    np.savez(path, features=X, labels=labels, **extra)
    return X, labels


def test_features_file_runs_the_protocol(tmp_path):
    X, labels = features_file(tmp_path / "f.npz", n_pretrain=np.array(20), n_test=np.array(15))
    res = simulate({"n": 10, "noise_rate": 0.2, "steps": 20}, data=str(tmp_path / "f.npz"))
    assert (res.config["n"], res.config["T"], res.config["d"]) == (10, 3, 5)
    assert res.data["n_noisy"] == 2 and res.engine["test_n"] == 15
    assert 0.5 <= res.final["test_acc"] <= 1.0
    # the training samples come from the file
    rng = make_streams(0).data
    ds = realdata.open_data(str(tmp_path / "f.npz")).dataset(Config(n=10, noise_rate=0.2), rng)
    rows = {tuple(np.round(x.ravel(), 12)) for x in X}
    assert all(tuple(np.round(x.ravel(), 12)) in rows for x in ds.X)
    assert np.count_nonzero(ds.y != ds.y_clean) == 2 and ds.X_test.shape == (15, 3, 5)


@pytest.mark.parametrize(
    "extra, needle",
    [
        ({"labels": None}, "needs arrays 'features'"),
        ({"labels": np.zeros(60)}, "labels -1 or +1"),
        ({"n_pretrain": np.array(2.5)}, "whole number"),
        ({"X": np.zeros(3)}, "holds only features"),
    ],
)
def test_bad_features_files_exit_2(tmp_path, capsys, extra, needle):
    rng = np.random.default_rng(0)
    arrays = {"features": rng.standard_normal((60, 3, 5)), "labels": np.where(np.arange(60) % 2, 1.0, -1.0)}
    arrays.update(extra)
    np.savez(tmp_path / "f.npz", **{k: v for k, v in arrays.items() if v is not None})
    assert main(["run", "--data", str(tmp_path / "f.npz"), "--out", str(tmp_path / "r"), *SMALL]) == 2
    assert needle in capsys.readouterr().err


def test_pool_too_small_for_n_exits_2(tmp_path, capsys):
    features_file(tmp_path / "f.npz")
    args = ["run", "--data", str(tmp_path / "f.npz"), "--set", "n=100", "--out", str(tmp_path / "r"), *SMALL]
    assert main(args) == 2
    assert "pool has 0 samples" not in capsys.readouterr().err  # 60 - 400 - 400: the split refuses first


def test_digits_end_to_end_without_network(tmp_path, monkeypatch):
    pytest.importorskip("sklearn")

    def no_network(*a, **k):
        raise AssertionError("attnsim tried to open a network connection")

    monkeypatch.setattr(socket, "socket", no_network)
    args = ["run", "--data", "digits", "--set", "n=10", "--set", "noise_rate=0.2", *SMALL]
    assert main([*args, "--out", str(tmp_path / "r")]) == 0
    res = json.loads((tmp_path / "r" / "result.json").read_text())
    assert (res["config"]["n"], res["config"]["T"], res["config"]["d"]) == (10, 16, 32)
    assert res["data"]["n_noisy"] == 2 and "digits" in res["data"]["source"]
    assert res["engine"]["test_n"] == realdata.DIGITS_TEST
    assert 0.5 < res["final"]["test_acc"] <= 1.0


def test_digits_without_scikit_learn_exit_2_with_the_install_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    assert main(["run", "--data", "digits", "--out", str(tmp_path / "r"), *SMALL]) == 2
    err = capsys.readouterr().err
    assert "scikit-learn" in err and "pip install 'attnsim[real]'" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("names", [[], ["selection", "real"]])
def test_figures_without_scikit_learn_refuse_before_any_figure(names, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    out = tmp_path / "figs"
    assert main(["figures", *names, "--quick", "--outdir", str(out), "--cache", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "figures real" in err[0] and "pip install 'attnsim[real]'" in err[0]
    assert not out.exists()


def test_digits_tokens_are_fixed_and_balanced():
    pytest.importorskip("sklearn")
    X, labels = realdata.load_digits_tokens(24)
    assert X.shape == (1797, 16, 24) and set(np.unique(labels)) == {-1.0, 1.0}
    assert abs(np.mean(labels)) < 0.05 and np.mean(X**2) == pytest.approx(1.0)
    assert np.array_equal(X, realdata.load_digits_tokens(24)[0])  # the feature map does not depend on a run


def test_protocol_command_writes_the_table(tmp_path, capsys):
    X, labels = features_file(tmp_path / "f.npz", N=80, n_pretrain=np.array(20), n_test=np.array(20))
    args = ["real", str(tmp_path / "f.npz"), "--n", "8", "40", "--eta", "0", "0.25", "--seeds", "2",
            "--set", "steps=20", "--out", str(tmp_path / "sw"), "--workers", "1"]  # fmt: skip
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert out.count("\n| 8 |") == 2 and out.count("\n| 40 |") == 2
    table = (tmp_path / "sw" / "real_f" / "table.csv").read_text().splitlines()
    assert table[0].startswith("n,eta,noise,seeds,train_loss") and len(table) == 5
    assert main(args) == 0  # resumes: nothing recomputed


def test_protocol_default_sizes_are_those_the_pool_holds_and_said(tmp_path):
    features_file(tmp_path / "f.npz", N=300, n_pretrain=np.array(20), n_test=np.array(20))
    mapping, messages = protocol.protocol_sweep(str(tmp_path / "f.npz"), None, [0.0], [0], {"steps": 5})
    assert mapping["grid"]["n"] == [20, 200]
    assert len(messages) == 1 and "holds 260 samples" in messages[0] and "n = 20, 200" in messages[0]


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--n", "1000"], "n: 1000: the training pool of"),
        (["--n", "8", "8"], "--n: duplicate values"),
        (["--set", "preset=magen2025"], "data_model: magen2025"),
        (["--set", "engine=implicit"], "implicit draws its own data"),
    ],
)
def test_protocol_refuses_what_no_point_can_run_before_any_work(extra, needle, tmp_path, capsys):
    """A pool smaller than n (it ran with the pool's size, silently), a preset or an engine
    no point can run with (every point failed late, an empty table): one line, nothing written."""
    features_file(tmp_path / "f.npz", N=80, n_pretrain=np.array(20), n_test=np.array(20))
    args = [
        "real",
        str(tmp_path / "f.npz"),
        "--n",
        "8",
        "--eta",
        "0",
        "--seeds",
        "1",
        "--out",
        str(tmp_path / "sw"),
    ]
    assert main([*args, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "sw").exists()


def test_protocol_table_means_over_seeds():
    def rec(seed, acc, base, noisy):
        config = {"n": 20, "noise_rate": 0.2, "seed": seed, "label_noise": "balanced"}
        return {"status": "ok", "config": config,
                "final": {"train_loss": 0.1, "train_acc": 1.0, "train_acc_noisy": noisy, "n_noisy": 4,
                          "test_acc": acc, "test_loss": 0.5},
                "trajectory": {"test_acc": [base, acc]}}  # fmt: skip

    (row,) = protocol.protocol_table([rec(0, 0.8, 0.9, 1.0), rec(1, 0.7, 0.85, 0.5), {"status": "failed"}])
    assert row["seeds"] == 2 and row["test_acc"] == pytest.approx(0.75)
    assert row["test_acc_sd"] == pytest.approx(np.std([0.8, 0.7], ddof=1))
    assert row["baseline_acc"] == pytest.approx(0.875) and row["noisy_fitted"] == pytest.approx(0.75)
    assert "| 20 | 0.2 | count | 2 |" in protocol.format_table([row])


def test_protocol_flips_independently_with_iid_label_noise():
    """label_noise = iid flips each label with probability eta (the official code's
    noise model); the default flips round(n eta) of them."""
    rng = np.random.default_rng(0)
    y = np.ones(20_000)
    flipped = realdata.flip(y, 0.2, rng, iid=True)
    assert abs(np.mean(flipped < 0) - 0.2) < 0.01 and np.sum(flipped < 0) != 4000
    assert np.sum(realdata.flip(y, 0.2, rng) < 0) == 4000


@pytest.mark.parametrize("n, engine", [(20, "reduced"), (997, "dense")])
def test_auto_engine_by_cost_at_both_ends(n, engine):
    used, why = choose_engine(Config(n=n, T=16, d=2000), user_data=True)
    assert used == engine
    if engine == "dense":
        assert "flops per step" in why


def test_digits_at_the_pool_size_picks_dense(tmp_path):
    pytest.importorskip("sklearn")
    res = simulate({"n": 997, "d": 64, "steps": 2}, data="digits")
    assert res.engine["used"] == "dense" and "would not be smaller" in res.engine["reason"]
