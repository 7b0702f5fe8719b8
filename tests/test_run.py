"""The driver end to end: grids, engines, reproducibility, results, parity."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import attnsim
from attnsim._meta import SimulationError
from attnsim.driver import log_grid, pop_indices
from attnsim.metrics import StateMetrics, final_metrics, regime


def test_log_grid_linear_and_log_include_ends():
    g = log_grid(95, "linear", 10, 100)
    assert g[0] == 0 and g[-1] == 95 and 90 in g and len(g) == 11
    g = log_grid(10**6, "log", 10, 60)
    assert g[0] == 0 and g[-1] == 10**6 and len(g) <= 60 and np.all(np.diff(g) > 0)
    assert list(log_grid(0, "linear", 10, 100)) == [0]
    idx = pop_indices(101, 50)
    assert idx[0] == 0 and idx[-1] == 100 and len(idx) <= 50


def test_simulate_records_everything(small_cfg):
    r = attnsim.simulate({**small_cfg, "test_n": 50}, save_scores=True)
    tr = r.trajectory
    L = len(tr["step"])
    assert tr["step"][0] == 0 and tr["step"][-1] == 50
    for key in (
        "train_loss",
        "train_acc",
        "pop_error",
        "test_acc",
        "score_clean_relevant",
        "frakS_clean",
        "W_dev",
    ):
        assert tr[key].shape == (L,)
    assert tr["scores"].shape == (L, 8, 6)
    assert tr["selected"].shape == (L, 8) and tr["selected_role"].shape == (L, 8)
    np.testing.assert_allclose(tr["scores"].sum(axis=2), 1.0)
    assert tr["frakS_clean"][0] == 0 and np.all(np.diff(tr["frakS_clean"]) > 0)
    assert np.isfinite(tr["pop_error"]).sum() <= 50 and np.isfinite(tr["pop_error"][[0, -1]]).all()
    assert r.final["pop_error_init"] == tr["pop_error"][0]
    f = r.final  # 50 steps: one of the six clean samples is still unfitted
    assert (f["regime"], f["n_fitted_clean"], f["n_clean"]) == ("underfit", 5, 6) and f[
        "generalized"
    ] is False
    assert f["regime"] == regime(
        f["n_clean"], f["n_fitted_clean"], f["n_noisy"], f["n_fitted_noisy"], f["excess_error"], 0.05
    )
    assert r.final["n_noisy"] == 2 and r.engine["used"] == "dense"  # n T + 2 = 50 >= d = 40: dense is cheaper


def test_reduced_equals_dense(small_cfg):
    a = attnsim.simulate({**small_cfg, "engine": "dense", "train": "W,p,nu", "init_p": "gaussian"})
    b = attnsim.simulate({**small_cfg, "engine": "reduced", "train": "W,p,nu", "init_p": "gaussian"})
    for key in ("train_loss", "pop_error", "pop_loss", "score_noisy_weak_opposite", "p_norm", "W_dev"):
        np.testing.assert_allclose(a.trajectory[key], b.trajectory[key], rtol=1e-10, atol=1e-14)


_RERUN = """
import sys, attnsim
attnsim.simulate({"n": 8, "T": 6, "d": 40, "signal_norm": 5.0, "steps": 50, "log_every": 5,
                  "pop_points": 256, "test_n": 30}).save(sys.argv[1])
"""


def test_bit_identical_reruns_in_fresh_processes(tmp_path):
    """Same seed, same threads: identical files, each run in its own process
    (no shared caches)."""
    for name in ("a", "b"):
        subprocess.run([sys.executable, "-c", _RERUN, str(tmp_path / name)], check=True)
    ja, jb = (json.loads((tmp_path / p / "result.json").read_text()) for p in "ab")
    for j in (ja, jb):
        j.pop("elapsed_s"), j.pop("setup_s"), j.pop("evaluation_s"), j.pop("startup_s")
    assert ja == jb
    ta, tb = np.load(tmp_path / "a" / "trajectory.npz"), np.load(tmp_path / "b" / "trajectory.npz")
    assert ta.files == tb.files
    for k in ta.files:
        np.testing.assert_array_equal(ta[k], tb[k])


def test_runs_in_one_process_match_a_fresh_process(small_cfg, tmp_path):
    """The per-process caches (reduced setup, Sobol points) do not change results."""
    subprocess.run([sys.executable, "-c", _RERUN, str(tmp_path / "fresh")], check=True)
    cfg = {**small_cfg, "test_n": 30}
    attnsim.simulate({**cfg, "signal_norm": 9.0})  # fills the caches with this seed and setup
    r = attnsim.simulate(cfg)
    fresh = np.load(tmp_path / "fresh" / "trajectory.npz")
    for k in ("train_loss", "pop_error", "pop_loss", "test_loss", "score_noisy_weak_opposite"):
        np.testing.assert_array_equal(r.trajectory[k], fresh[k], err_msg=k)


_THREAD_SCRIPT = """
import sys, numpy as np, attnsim
r = attnsim.simulate({"engine": sys.argv[1], "d": 700, "steps": 60, "log_every": 20, "pop_points": 256})
np.save(sys.argv[2], np.stack([r.trajectory["train_loss"], r.trajectory["pop_error"], r.trajectory["W_dev"]]))
"""


@pytest.mark.parametrize("engine", ["dense", "reduced"])
def test_thread_counts_agree(tmp_path, engine):
    outs = []
    for threads in ("1", "2"):
        env = dict(
            os.environ, NUMBA_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads
        )
        out = tmp_path / f"t{threads}.npy"
        subprocess.run([sys.executable, "-c", _THREAD_SCRIPT, engine, str(out)], env=env, check=True)
        outs.append(np.load(out))
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-12, atol=1e-300)


def test_save_and_load_roundtrip(small_cfg, tmp_path):
    r = attnsim.simulate(small_cfg)
    r.save(tmp_path / "run")
    back = attnsim.load(tmp_path / "run")
    assert back.config == r.config and back.final["regime"] == r.final["regime"]
    assert (
        back.schema_version == attnsim.results.SCHEMA_VERSION
        and back.versions["attnsim"] == attnsim.__version__
    )
    np.testing.assert_array_equal(back.trajectory["train_loss"], r.trajectory["train_loss"])
    assert not list((tmp_path / "run").glob(".*tmp"))


def test_divergence_raises_with_step():
    with pytest.raises(SimulationError, match=r"diverged at step \d+"):
        attnsim.simulate(
            {"n": 4, "T": 4, "d": 20, "lr": 1e305, "steps": 20, "loss": "linear", "train": "p,nu"}
        )


def test_frozen_run_warns_and_keeps_going():
    with pytest.warns(UserWarning, match="frozen after step"):
        r = attnsim.simulate(
            {"n": 4, "T": 4, "d": 50, "signal_norm": 50, "lr": 1e6, "steps": 30, "log_every": 10}
        )
    assert r.data["status"] == "frozen" and r.warnings
    assert len(r.trajectory["step"]) == 4 and np.ptp(r.trajectory["train_loss"][1:]) == 0


def test_regime_rules_from_counts():
    assert regime(16, 16, 4, 0, 0.01, 0.05) == "not_overfitting"
    assert regime(16, 16, 4, 2, 0.01, 0.05) == "partial"
    assert regime(16, 16, 4, 4, 0.01, 0.05) == "benign"
    assert regime(16, 16, 4, 4, 0.1, 0.05) == "harmful"
    assert regime(16, 16, 4, 4, 0.1, 0.2) == "benign"
    assert regime(16, 15, 4, 4, 0.01, 0.05) == "underfit"
    assert regime(16, 16, 4, 4, None, 0.05) == "fitted"
    # no noisy samples: no label-overfitting verdict, whatever the error
    assert regime(16, 16, 0, 0, 0.01, 0.05) == regime(16, 16, 0, 0, 0.3, 0.05) == "clean_labels"
    assert regime(16, 15, 0, 0, 0.01, 0.05) == "underfit"


def _final(error, clean=None, bayes=0.0, n_noisy=4, se=0.0):
    y = np.ones(20)
    acc = {"n_fitted_clean": 20 - n_noisy, "n_fitted_noisy": n_noisy}
    arrays = {"y": y, "pop_error": np.array([error]), "pop_error_se": np.array([se]),
              **{k: np.array([v]) for k, v in acc.items()}}  # fmt: skip
    twin = None if clean is None else {"pop_error": clean, "pop_error_se": 0.0}
    known = (
        None if bayes is None else {"bayes_error": bayes, "bayes_error_se": 0.0, "bayes_error_resolved": 1.0}
    )
    return final_metrics(arrays, n_noisy, 0.05, twin, known)


def test_regime_is_the_excess_over_the_bayes_error():
    """benign / harmful follow the error in excess of the Bayes error (SPEC §3),
    not the clean-label twin: memorizing through noise tokens is harmful even
    when the twin errs as much (the paper's harmful regime)."""
    f = _final(0.0035, 0.0006)
    assert f["regime"] == "benign" and f["generalized"] and f["excess_error"] == 0.0035
    assert f["label_noise_cost"] == pytest.approx(0.0029) and f["error_clean_twin"] == 0.0006
    f = _final(0.12, 0.11, bayes=1.8e-4)  # the twin fails the same way: still harmful
    assert (
        f["regime"] == "harmful"
        and not f["generalized"]
        and f["excess_error"] == pytest.approx(0.12 - 1.8e-4)
    )
    f = _final(0.10, 0.09, bayes=0.077)  # a hard problem solved near its floor: benign
    assert f["regime"] == "benign" and f["generalized"] and f["regime_rule"] == "excess over the Bayes error"
    f = _final(0.12, bayes=None)  # no data model: the error itself
    assert f["regime"] == "harmful" and f["regime_rule"].startswith("the error itself")
    assert math.isnan(f["error_clean_twin"]) and math.isnan(f["error_clean_twin_resolved"])


def test_a_verdict_within_two_standard_errors_of_the_threshold_is_borderline():
    assert _final(0.049, se=0.002)["regime_borderline"] and _final(0.049, se=0.002)["regime"] == "benign"
    assert _final(0.052, se=0.002)["regime_borderline"] and _final(0.052, se=0.002)["regime"] == "harmful"
    assert not _final(0.04, se=0.002)["regime_borderline"]


def test_no_error_measure_gives_no_generalization_verdict():
    arrays = {"y": np.ones(6), "n_fitted_clean": np.array([6]), "n_fitted_noisy": np.array([0])}
    f = final_metrics(arrays, 0, 0.05)
    assert f["generalized"] is None and f["regime"] == "clean_labels"


def test_no_label_noise_is_never_benign_or_harmful_and_the_twin_is_that_run():
    """At |mu| = 5 without label noise the error is above 0.05 (uniform attention:
    0.106): not "harmful overfitting" but clean_labels, not generalizing. The
    clean-label twin of the noisy run is that same run, to the last bit."""
    clean = attnsim.simulate({"signal_norm": 5.0, "noise_rate": 0.0})
    assert clean.final["regime"] == "clean_labels" and not clean.final["generalized"]
    assert np.isnan(clean.final["label_noise_cost"])
    assert clean.final["pop_error_uniform"] == pytest.approx(0.1056, abs=1e-4)  # Phi(-5 / sqrt(16))
    noisy = attnsim.simulate({"signal_norm": 5.0})
    assert noisy.final["error_clean_twin"] == clean.final["pop_error"]  # the same steps, the same points
    cost = noisy.final["pop_error"] - clean.final["pop_error"]
    assert noisy.final["label_noise_cost"] == pytest.approx(cost)
    off = attnsim.simulate({"signal_norm": 5.0, "clean_twin": False})
    assert (
        np.isnan(off.final["error_clean_twin"]) and off.final["regime"] == noisy.final["regime"] == "harmful"
    )


def test_start_up_counts_what_the_announcing_warm_up_imports(monkeypatch):
    """``attnsim run`` (not quiet) warms up with an announcer, which first imports Numba's
    cache hook: those seconds are start-up, as in the quiet warm-up, not the run's setup
    (they were: a default run's setup_s read 0.29 s instead of 0.08 s)."""
    import sys
    import time
    import types

    import attnsim.run
    from attnsim.runtime.workspace import Workspace

    class SlowHook(types.ModuleType):  # its ON_MISS takes as long as importing Numba
        @property
        def ON_MISS(self):
            time.sleep(0.05)
            return []

    monkeypatch.setitem(sys.modules, "attnsim.runtime.numba_cache", SlowHook("numba_cache"))
    quick = types.SimpleNamespace(warm_up=lambda: None, warm_configs={"gd": None})  # a warm-up of no time
    monkeypatch.setattr(attnsim.run.registry, "spec", lambda model: quick)
    monkeypatch.setattr(attnsim.run, "simulate", lambda *a, **k: None)
    assert attnsim.run.ensure_compiled(announce=lambda: None, workspace=Workspace()) >= 0.05


def test_the_clean_twin_is_measured_at_its_end_alone(monkeypatch):
    """At step 0 the twin is the run (the same P(0), the same measure): of its evaluations
    only the last is made, and its error is still that of the noise-free run."""
    from attnsim.models.attention import population
    from attnsim.run import ensure_compiled

    ensure_compiled("gd")  # its warm-up run evaluates too
    cfg = {"signal_norm": 5.0, "steps": 200, "log_every": 10, "pop_log_points": 5}
    calls = []
    evaluate = population.Population.evaluate

    def counted(self, *args):
        calls.append(1)
        return evaluate(self, *args)

    monkeypatch.setattr(population.Population, "evaluate", counted)
    clean = attnsim.simulate({**cfg, "noise_rate": 0.0})
    alone = len(calls)
    noisy = attnsim.simulate(cfg)
    assert len(calls) - alone == alone + 1  # the run's own, the twin's one
    assert noisy.final["error_clean_twin"] == clean.final["pop_error"]


def test_the_encoder_twin_trains_on_its_own_copy_of_the_initial_parameters():
    """The run's stepper takes P(0)'s arrays, the twin draws them again on its thread:
    a noisy run's twin is the clean run, to the last bit."""
    cfg = {"model": "encoder", "d": 64, "mlp_dim": 64, "steps": 5, "test_n": 50, "clean_twin": True}
    clean = attnsim.simulate({**cfg, "noise_rate": 0.0})
    noisy = attnsim.simulate(cfg)
    assert noisy.final["error_clean_twin"] == 1.0 - clean.final["test_acc"]


@pytest.mark.parametrize("n_clean", [12, 14, 18, 20])
def test_accuracy_of_non_power_of_two_groups_is_not_exactly_one(n_clean):
    """Group accuracies are sums of 1/n weights; the regime must not depend on them."""
    y = np.ones(n_clean)
    m = StateMetrics(y, y, None)
    acc = m.accuracy(np.ones(n_clean))
    assert acc["n_fitted_clean"] == n_clean and acc["n_fitted_noisy"] == 0
    final = final_metrics(
        {"y": y, "pop_error": np.array([0.0]), **{k: np.array([v]) for k, v in acc.items()}}, 0, 0.05
    )
    assert final["regime"] == "clean_labels"


@pytest.mark.parametrize(
    "over", [{"noise_rate": 0.0}, {"n": 18, "steps": 3000}, {"n": 14, "noise_rate": 0.3, "steps": 3000}]
)
def test_runs_that_fit_every_sample_are_never_underfit(over):
    r = attnsim.simulate({**over, "log_every": 500, "pop_log_points": 2})
    f = r.final
    assert f["n_fitted_clean"] == f["n_clean"]
    if f["n_fitted_noisy"] == f["n_noisy"]:
        assert f["regime"] in (("benign", "harmful") if f["n_noisy"] else ("clean_labels",))
    assert f["regime"] != "underfit"


@pytest.mark.parametrize("engine", ["dense", "reduced"])
def test_parity_with_official_pytorch_run(fixture_path, engine):
    f = np.load(fixture_path)
    steps = int(f["steps"])
    cfg = {"lr": float(f["lr"]), "steps": steps, "log_every": 1, "engine": engine, "pop_log_points": 2}
    r = attnsim.simulate(cfg, data=fixture_path, save_scores=True)
    loss = r.trajectory["train_loss"]
    np.testing.assert_allclose(loss[:-1], f["loss_before_step"], rtol=1e-5)
    assert loss[-1] == pytest.approx(float(f["loss_final"]), rel=1e-5)
    np.testing.assert_allclose(r.trajectory["scores"][:-1], f["scores_before_step"], atol=1e-5)
    np.testing.assert_allclose(r.trajectory["scores"][-1], f["scores_final"], atol=1e-5)
    assert r.final["n_noisy"] == int(np.sum(f["y"] != f["y_clean"]))


def test_data_without_signals_has_null_population(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "d.npz"
    np.savez(
        path, X=rng.standard_normal((6, 4, 10)), y=np.array([1, 1, 1, -1, -1, -1]), nu=rng.standard_normal(10)
    )
    r = attnsim.simulate({"steps": 5, "log_every": 1}, data=path)
    assert np.isnan(r.final["pop_error"]) and "mu_pos" in r.data["population"]
    assert np.isnan(r.final["score_clean_relevant"])
    assert r.to_json()["final"]["pop_error"] is None


def test_final_holds_only_declared_metrics():
    from attnsim.metric_names import MEASURED_TIMES
    from attnsim.metrics import LOG_METRICS

    # a 2-point grid (example_index has 2 entries) and n = number of log points (gap_token has n)
    r = attnsim.simulate(
        {"n": 6, "T": 4, "d": 30, "steps": 5, "log_every": 1, "pop_points": 64}, save_scores=True
    )
    assert len(r.trajectory["step"]) == 6 == r.trajectory["gap_token"].size
    twin = {f"{k}{s}" for k in ("error_clean_twin", "excess_error", "label_noise_cost", "bayes_error")
            for s in ("", "_se", "_resolved")} | {"clean_twin"}  # fmt: skip
    verdicts = {"pop_error_init", "pop_error_uniform", "n_noisy", "n_clean", "regime", "regime_rule",
                "regime_borderline", "generalized"}  # fmt: skip
    extra = set(r.final) - set(LOG_METRICS) - verdicts - twin - set(MEASURED_TIMES)
    assert not extra, extra
    r = attnsim.simulate({"n": 6, "T": 4, "d": 30, "steps": 1, "pop_points": 64})
    assert "example_index" not in r.final and "selected" not in r.final


@pytest.mark.parametrize(
    "over", [{"lr": 1e300}, {"lr": 1e300, "train": "p"}, {"lr": 1e250, "train": "W,p,nu"}]
)
def test_overflow_is_divergence_naming_the_step(over):
    with pytest.raises(SimulationError, match=r"diverged (at|by) step \d+"):
        attnsim.simulate({"n": 6, "T": 4, "d": 30, "steps": 20, "pop_points": 64, **over})


def test_stalled_flow_stops_with_a_message(monkeypatch):
    from attnsim.models.attention.steppers import FlowField

    monkeypatch.setattr(FlowField, "max_evals", 2000)
    with pytest.raises(SimulationError, match="gradient flow stalled"):
        attnsim.simulate({"n": 6, "T": 4, "d": 30, "steps": 100, "lr": 1e300, "integrator": "flow"})


def test_a_flow_that_barely_begins_its_span_stops_after_the_stall_check():
    """Steps of 1e-120 of the span: stalled after STALL_EVALS evaluations in it, not the whole budget."""
    from attnsim.models.attention.steppers import FlowField

    n = FlowField.STALL_EVALS
    with pytest.raises(SimulationError, match=f"stalled between steps 0 and .*: {n} evaluations"):
        attnsim.simulate({"n": 6, "T": 4, "d": 30, "steps": 100, "lr": 1e300, "integrator": "flow"})


def test_sparse_log_points_use_the_x_w_form_with_the_same_results():
    """Log points 1000 steps apart: the GD kernel keeps X W (faster); the
    final state matches a run logged every 10 steps (the W form) to rounding."""
    cfg = {"n": 10, "T": 6, "d": 300, "steps": 1000, "pop_points": 256, "test_n": 50}
    sparse = attnsim.simulate({**cfg, "log_every": 1000})
    dense = attnsim.simulate({**cfg, "log_every": 10})
    assert sparse.engine["gd_state"].startswith("X W") and dense.engine["gd_state"].startswith("W ")
    for key in (
        "train_loss",
        "pop_error",
        "pop_loss",
        "test_loss",
        "p_norm",
        "W_dev",
        "score_noisy_weak_opposite",
    ):
        assert sparse.trajectory[key][-1] == pytest.approx(dense.trajectory[key][-1], rel=1e-9, abs=1e-12), (
            key
        )
    assert sparse.final["regime"] == dense.final["regime"]
    np.testing.assert_array_equal(sparse.trajectory["fit_step"], dense.trajectory["fit_step"])


def test_population_metrics_computed_beside_the_steps_equal_inline_ones(small_cfg, monkeypatch):
    """The driver hands population metrics to a second thread (the evaluator's
    ``defer``) while the steps go on; the same run evaluated inline agrees exactly."""
    from attnsim.metrics import POP_KEYS
    from attnsim.models.attention.problem import StateEvaluator
    from attnsim.models.base import Done
    from attnsim.runtime.threads import threads

    assert threads() == 2 or os.environ.get("NUMBA_NUM_THREADS") == "1"
    deferred = attnsim.simulate(small_cfg)
    monkeypatch.setattr(StateEvaluator, "defer", lambda self, state: Done(self(state)))  # measured at once
    inline = attnsim.simulate(small_cfg)
    assert np.isfinite(deferred.trajectory["pop_loss"]).sum() == 11
    for key in POP_KEYS:
        np.testing.assert_array_equal(deferred.trajectory[key], inline.trajectory[key])


def test_a_deferred_metric_that_overflows_names_its_step(small_cfg, monkeypatch):
    """The overflow is injected into the evaluation of one state (the third log point the
    driver defers, step 10), whichever thread computes it and whenever: the run names that
    step, not the first one computed nor an earlier one."""
    from attnsim.models.attention.problem import StateEvaluator
    from attnsim.run import ensure_compiled

    ensure_compiled("gd")  # its warm-up run evaluates too
    defer = StateEvaluator.defer
    deferred = []

    class Overflowing:  # the job of one state: its population loss overflowed
        def __init__(self, job):
            self.job = job

        def result(self):
            return {**self.job.result(), "pop_loss": np.inf}

        def cancel(self):
            return self.job.cancel()

    def overflow_at_the_third(self, state):
        job = defer(self, state)
        deferred.append(1)
        return Overflowing(job) if len(deferred) == 3 else job

    monkeypatch.setattr(StateEvaluator, "defer", overflow_at_the_third)
    with pytest.raises(SimulationError, match=r"diverged by step 10: pop_loss = inf"):
        attnsim.simulate({**small_cfg, "clean_twin": False})  # the run's own evaluations alone


def test_score_metrics_do_not_depend_on_how_many_log_points_are_measured_at_once(small_cfg, monkeypatch):
    from attnsim import observers

    whole = attnsim.simulate({**small_cfg, "log_every": 1}, save_scores=True).trajectory
    monkeypatch.setattr(observers, "RECORD_CHUNK", 3)
    chunked = attnsim.simulate({**small_cfg, "log_every": 1}, save_scores=True).trajectory
    assert list(whole) == list(chunked) and whole["step"].size == 51
    for key in whole:
        assert whole[key].dtype == chunked[key].dtype, key
        np.testing.assert_array_equal(whole[key], chunked[key], err_msg=key)


def test_refine_times_follows_the_flow_and_the_limit_unless_told():
    from attnsim.config import Config
    from attnsim.training import refines_times

    cfg = {"n": 6, "T": 4, "d": 30, "steps": 40, "log_every": 20, "pop_points": 64, "limit": True}
    assert attnsim.simulate(cfg).final["times_refined"] is not None
    off = attnsim.simulate({**cfg, "refine_times": "false"})
    assert off.final["times_refined"] is False and off.limit is not None
    assert Config(refine_times="auto").hash() == Config().hash()  # a later key, neutral by default
    assert refines_times(Config(limit=True)) and not refines_times(Config(limit=True, refine_times="false"))
    assert refines_times(Config(refine_times="true")) and not refines_times(Config())


def test_a_fresh_workspace_shares_no_cache_and_clear_keeps_the_sweep_switch():
    """Runs in their own Workspace fill only its caches and give the same numbers;
    clear() empties the caches but keeps whether W(0) draws and exact runs are kept (a
    sweep worker's switches); the threads belong to the process, not to a workspace."""
    from attnsim.runtime.workspace import PROCESS, WORKSPACE, Workspace

    cfg = {"n": 6, "T": 4, "d": 40, "steps": 20, "log_every": 10, "pop_points": 64, "seed": 77}
    ws = Workspace()
    before = (set(WORKSPACE.setups), set(WORKSPACE.populations), set(WORKSPACE.bayes))
    a = attnsim.simulate(cfg, workspace=ws)
    assert (set(WORKSPACE.setups), set(WORKSPACE.populations), set(WORKSPACE.bayes)) == before
    assert ws.populations and ws.bayes and ws.warm
    b = attnsim.simulate(cfg, workspace=Workspace())
    for key in ("train_loss", "pop_error", "pop_loss"):
        np.testing.assert_array_equal(a.trajectory[key], b.trajectory[key])
    ws.kept_draws.enabled = ws.kept_run.enabled = True
    ws.kept_run.keep("a run", {"kept": 1})
    ws.clear()
    assert ws.kept_draws.enabled and not ws.populations and not ws.warm
    assert ws.kept_run.enabled and ws.kept_run.take("a run") is None
    assert not hasattr(ws, "executors") and isinstance(PROCESS.executors, dict)


def test_background_jobs_wait_while_a_twin_steps_and_go_on_after_its_collect(monkeypatch):
    """While a twin steps beside its run, the run's queued evaluations wait (three threads on two
    cores took turns, and the evaluations 3-4x their time); the twin's collect, or its end, lets
    the queue go on, in the order the jobs were queued."""
    import threading
    import time

    from attnsim.models.attention.problem import _Deferred
    from attnsim.runtime import threads
    from attnsim.runtime.workspace import PROCESS

    monkeypatch.setattr(threads, "threads", lambda: 2)
    stepping, collect = threading.Event(), threading.Event()

    def twin():
        stepping.set()
        collect.wait(10)
        threads.stepping_done()  # as the driver's collect does
        return "twin"

    beside = threads.Beside(twin)
    stepping.wait(10)
    ran = []
    jobs = [
        _Deferred({"now": i}, threads.in_background(lambda i=i: ran.append(i) or {"x": i})) for i in range(3)
    ]
    time.sleep(0.05)
    assert ran == []  # held while the twin steps
    collect.set()  # the twin collects: the queue goes on
    assert [job.result() for job in jobs] == [{"now": i, "x": i} for i in range(3)]
    assert beside.result() == "twin" and ran == [0, 1, 2]
    failing = threads.Beside(lambda: 1 / 0)  # a twin that fails before its collect lets go too
    with pytest.raises(ZeroDivisionError):
        failing.result()
    assert threads.in_background(lambda: "free").result() == "free"
    PROCESS.beside.wait()  # no hold left
