"""Positional and semantic attention (Cui et al. 2024; SPEC §18): the fused kernels against the
NumPy reference, the population risk against large finite test sets, the keys' rules, the
linear baseline against its closed form, and the pipeline (run, --seeds, rerun) at small d."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from attnsim import registry, simulate
from attnsim.cli import main
from attnsim.config import Config, ConfigError
from attnsim.models.positional_semantic import kernels as K
from attnsim.models.positional_semantic import model as M
from attnsim.models.positional_semantic import reference as R
from attnsim.models.positional_semantic.spec import PUBLISHED

FINAL = tuple(registry.MODELS["positional_semantic"].metrics)  # every metric it declares

MODEL = "positional_semantic"
SMALL = {"model": MODEL, "d": 40, "n": 30, "steps": 40, "log_every": 10, "test_n": 50, "pop_points": 4096}


def _case(T: int, r: int, seed: int = 0, d: int = 37, n: int = 11):
    A = (0.5 * np.eye(T) + 0.5 / T).tolist()
    cfg = Config(model=MODEL, T=T, rank=r, d=d, n=n, teacher_A=A, omega=0.4)
    rng = np.random.default_rng(seed)
    Qs = rng.standard_normal((d, r))
    tokens = M.draw(n, cfg, Qs, np.random.default_rng(seed + 1))
    xi = tokens.X - R.positions(T, d)
    return cfg, Qs, tokens, xi, R.teacher(xi, Qs, cfg.omega, np.array(A)), rng.standard_normal((d, r))


@pytest.mark.parametrize(("T", "r"), [(2, 1), (3, 2), (4, 1), (2, 3)])
def test_the_fused_kernel_is_the_reference_loss_and_gradient(T, r):
    cfg, Qs, tokens, xi, Y, Q = _case(T, r)
    grad = np.empty_like(Q)
    loss = K.loss_grad(tokens.X, Q, tokens.K, tokens.C, tokens.yy, grad)
    assert loss == pytest.approx(R.loss(tokens.X, Y, Q), rel=1e-13)
    ref = R.grad(tokens.X, Y, Q)
    assert np.abs(grad - ref).max() <= 1e-13 * np.abs(ref).max()
    assert K.loss_only(tokens.X, Q, tokens.K, tokens.C, tokens.yy) == loss
    # the per-sample constants and the linear baseline's sums, from the tokens themselves
    np.testing.assert_allclose(tokens.K, tokens.X @ np.swapaxes(tokens.X, 1, 2), rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(tokens.xixi, np.einsum("itd,isd->ts", xi, xi), rtol=1e-13)
    np.testing.assert_allclose(tokens.yxi, np.einsum("itd,isd->ts", Y, xi), rtol=1e-12)


def test_the_data_do_not_depend_on_the_chunk_they_are_drawn_in(monkeypatch):
    cfg, Qs, whole, *_ = _case(2, 1, n=40)
    monkeypatch.setattr(M, "CHUNK_FLOATS", 3 * 2 * 37)  # three samples at a time
    chunked = M.draw(40, cfg, Qs, np.random.default_rng(1))
    for name in ("X", "K", "C", "yy"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(chunked, name), err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize(("T", "r", "init"), [(2, 1, "semantic"), (2, 1, "positional"), (3, 2, "random")])
def test_the_population_error_agrees_with_large_test_sets(T, r, init):
    """The estimator (Monte Carlo over span(1, Q, Q*), the rest integrated exactly) against the
    mean error of 200 000 fresh samples: the difference within 4 combined standard errors."""
    A = (0.5 * np.eye(T) + 0.5 / T).tolist()
    cfg = Config(model=MODEL, T=T, rank=r, d=60, n=50, teacher_A=A, pop_points=2**17, init=init)
    rng = np.random.default_rng(5)
    Qs = rng.standard_normal((cfg.d, r))
    Q = M.initial_Q(cfg, Qs, rng) + 0.7 * rng.standard_normal((cfg.d, r))
    Q[:, 0] += 6.0 / math.sqrt(cfg.d)  # a positional component too
    pop = M.Population(cfg, Qs, np.random.default_rng(7))
    B = 0.5 * np.eye(T) + 0.3 * rng.standard_normal((T, T))
    draws = np.random.default_rng(9)
    att, lin = [], []
    for _ in range(10):
        tokens = M.draw(20000, cfg, Qs, draws)
        att.append(K.loss_only(tokens.X, Q, tokens.K, tokens.C, tokens.yy) / 20000)
        # |B xi - Y|^2 from the sums: tr(B xixi B^T) - 2 tr(B yxi^T) + sum |Y|^2
        lin.append(
            (np.trace(B @ tokens.xixi @ B.T) - 2 * np.trace(B @ tokens.yxi.T) + tokens.yy.sum())
            / (2 * cfg.d)
            / 20000
        )
    for (value, se), samples in ((pop.error(Q), att), (pop.linear_error(B), lin)):
        ref, ref_se = np.mean(samples), np.std(samples, ddof=1) / math.sqrt(len(samples))
        assert abs(value - ref) < 4 * math.hypot(se, ref_se), (value, se, ref, ref_se)


def test_alpha_sets_n_and_a_conflicting_n_is_refused():
    cfg = Config(model=MODEL, alpha=1.5, d=200)
    assert cfg.n == 300
    assert cfg.replace(d=100).n == 150  # decided again from alpha
    with pytest.raises(ConfigError, match="n: 77 is not round"):
        Config(model=MODEL, alpha=1.5, d=200, n=77)
    with pytest.raises(ConfigError, match="alpha: applies to model=positional_semantic only"):
        Config(alpha=1.0)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"noise_rate": 0.1}, "noise_rate: model=positional_semantic does not read it"),
        ({"signal_norm": 3.0}, "signal_norm: model=positional_semantic does not read it"),
        ({"clean_twin": True}, "clean_twin: model=positional_semantic does not read it"),
        ({"teacher_A": [[1.0, 0.0]]}, "teacher_A: must be a T x T matrix"),
        ({"T": 3}, r"teacher_A: must be a T x T matrix \(T = 3\), got 2 x 2; give one for this T"),
        ({"teacher_A": [[1.0, 0.0], [0.5]]}, r"got rows of lengths \[2, 1\]"),
        ({"teacher_A": [[1e308, 1.0], [1.0, 1.0]]}, "teacher_A: an entry of size 1e.308 makes"),
        ({"teacher_A": [[1.0, "a"], [0.0, 1.0]]}, "teacher_A: every entry must be a finite number"),
        ({"teacher_A": 3.0}, "teacher_A: expected a matrix"),
        ({"omega": 1.5}, "omega: must be in"),
        ({"rank": 0}, "rank: must be"),
        ({"init": "noise"}, "init: 'noise' is not one of"),
        ({"alpha": -1.0}, "alpha: must be > 0"),
        ({"optimizer": "normalized"}, "optimizer: model=positional_semantic does not run"),
        ({"integrator": "flow"}, "integrator: model=positional_semantic does not run"),
    ],
)
def test_settings_the_model_cannot_run_are_refused_by_name(keys, message):
    with pytest.raises(ConfigError, match=message):
        Config(model=MODEL, **keys)


def test_the_linear_baseline_converges_to_least_squares():
    """Adam on the summed loss of B xi (T x T) reaches the regularized least-squares map."""
    cfg, Qs, tokens, xi, Y, _ = _case(2, 1, n=400, d=50)
    pop = M.Population(cfg.replace(pop_points=1024), Qs, np.random.default_rng(0))
    out = M.linear_baseline(tokens, cfg.n, cfg, np.random.default_rng(3), pop)
    wd = M.LINEAR["weight_decay"]
    best = np.linalg.solve(tokens.xixi / cfg.d + wd * np.eye(2), tokens.yxi.T / cfg.d).T
    assert np.abs(out["B"] - best).max() < 0.05
    assert out["linear_gen_error"] >= pop.linear_error(best)[0] - 3 * out["linear_gen_error_se"]


def test_a_run_records_every_declared_metric_and_reruns_bit_for_bit():
    res = simulate({**SMALL, "init": "positional"})
    assert set(FINAL) <= set(res.final) and all(res.final[k] is not None for k in FINAL)
    assert res.final["gen_error_se"] < 0.1 * res.final["gen_error"]
    again = simulate(res.config)  # the saved, resolved config
    assert json.dumps(again.final) == json.dumps(res.final)
    for k, v in res.trajectory.items():
        np.testing.assert_array_equal(again.trajectory[k], v, err_msg=k)
    assert res.final["theta"] < 0.2 and res.final["magnetization"] > 0.05  # a positional solution


def test_run_seeds_prints_mean_and_sd_of_the_published_metrics(tmp_path, capsys):
    sets = [f"--set={k}={v}" for k, v in SMALL.items()] + ["--set=alpha=0.75", "--set=n=30"]
    assert main(["run", "--seeds", "0-2", "--out", str(tmp_path / "s"), *sets]) == 0
    out = capsys.readouterr().out
    assert "3 seeds (0-2): mean +- standard deviation over seeds" in out
    for name in PUBLISHED:
        assert f"  {name} " in out and "(sd)" in out.split(f"  {name} ")[1].split("\n")[0]
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["seed-0", "seed-1", "seed-2"]


def test_the_published_slice_sweep_file_holds_their_grid():
    from pathlib import Path

    from attnsim.sweep import read_spec

    spec = read_spec(Path(__file__).resolve().parents[1] / "scripts" / "cui2024_omega0.3.sweep.toml")
    points = list(spec.points())
    assert len(points) == 25 * 2 * 24
    assert sorted({p.alpha for p in points}) == [float(a) for a in np.linspace(0.01, 2, 25)]
    assert {(p.d, p.omega, p.sigma, p.weight_decay, p.lr, p.steps) for p in points} == {
        (1000, 0.3, 0.5, 0.01, 0.15, 5000)
    }


def test_a_sweep_of_the_model_records_its_metrics(tmp_path):
    from attnsim.sweep import parse_sweep, run_sweep

    base = {k: v for k, v in SMALL.items() if k != "n"}
    data = {"sweep": {"name": "ps", "seeds": [0, 1]}, "base": base, "grid": {"alpha": [0.5, 1.0]}}
    report = run_sweep(parse_sweep(data), tmp_path, workers=1, progress=False)
    recs = report.records()
    assert len(recs) == 4 and all(r["status"] == "ok" for r in recs)
    assert {r["config"]["n"] for r in recs} == {20, 40}
    assert all(set(FINAL) <= set(r["final"]) for r in recs)
    header = (tmp_path / "ps" / "records.csv").read_text().splitlines()[0].split(",")
    assert {"gen_error", "theta", "magnetization", "linear_gen_error"} <= set(header)


def test_the_matrix_key_is_written_as_a_nested_list_and_hashes_as_before():
    cfg = Config(model=MODEL)
    assert cfg.to_dict()["teacher_A"] == [[0.6, 0.4], [0.4, 0.6]]
    assert Config(model=MODEL, teacher_A=np.array([[0.6, 0.4], [0.4, 0.6]])).hash() == cfg.hash()
    assert "teacher_A" not in json.dumps(__import__("attnsim.config").config.hashed(Config().to_dict()))


def test_its_runs_plot_their_own_metrics(tmp_path):
    sets = [f"--set={k}={v}" for k, v in SMALL.items()]
    assert main(["run", "--out", str(tmp_path / "r"), "--plot", "metrics", *sets]) == 0
    assert (tmp_path / "r" / "metrics.png").stat().st_size > 0
    assert main(["plot", str(tmp_path / "r"), "--out", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 0


def test_saving_token_scores_is_refused_not_ignored():
    with pytest.raises(ConfigError, match="save_scores: model=positional_semantic keeps no"):
        simulate(SMALL, save_scores=True)


def test_its_saved_config_runs_again_from_a_toml_file(tmp_path):
    res = simulate({**SMALL, "alpha": 0.75, "n": 30})
    body = "".join(f"{k} = {json.dumps(v)}\n" for k, v in res.config.items() if v is not None)
    (tmp_path / "c.toml").write_text(body)
    again = simulate(tmp_path / "c.toml")
    assert json.dumps(again.final) == json.dumps(res.final)


def test_a_run_saved_before_train_loss_was_renamed_loads_with_its_new_name(tmp_path):
    """positional_semantic's summed loss was `train_loss` (a classifier run's name for a mean):
    a result written then loads with it as `train_loss_sum`."""
    import json

    import attnsim

    res = attnsim.simulate({"model": "positional_semantic", "n": 6, "d": 8, "steps": 2, "test_n": 4,
                            "pop_points": 64})  # fmt: skip
    res.save(tmp_path / "r")
    meta = json.loads((tmp_path / "r" / "result.json").read_text())
    meta["final"]["train_loss"] = meta["final"].pop("train_loss_sum")
    (tmp_path / "r" / "result.json").write_text(json.dumps(meta))
    got = attnsim.load(tmp_path / "r")
    assert got.final["train_loss_sum"] == res.final["train_loss_sum"] and "train_loss" not in got.final
