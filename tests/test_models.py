"""One conformance suite over every registered model (as diffrax tests every solver
through one list): the interface of attnsim/models/base.py, what the recorder reads,
steps in pieces, snapshots, gradients, outcomes. A model is tested here the moment its
registry line exists; a toy model added only through the recipe runs end to end."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from attnsim import registry
from attnsim.config import Config
from attnsim.data.dataset import make_streams
from attnsim.models.base import GRAD_TOL, GradCheck, ModelSpec, Outcome, Stepper
from attnsim.runtime.workspace import Workspace

MODELS = list(registry.MODELS)


def _stepper(name: str, **over):
    spec = registry.spec(name)
    cfg = Config(**{**spec.warm_configs["gd"], "steps": 20, **over})
    engine, reason = spec.plan(cfg, user_data=False)
    problem, ds = spec.build(cfg, None, make_streams(cfg.seed), engine, reason, Workspace())
    return problem.stepper(cfg, ds.relevant_indicator(problem.T)), ds


@pytest.mark.parametrize("name", MODELS)
def test_spec_declares_the_interface(name):
    spec = registry.spec(name)
    assert isinstance(spec, ModelSpec) and spec.name == name and "gd" in spec.warm_configs
    cfg = Config(**spec.warm_configs["gd"])
    engine, reason = spec.plan(cfg, user_data=False)
    assert engine in registry.MODELS[name].engines and isinstance(reason, str) and reason
    assert isinstance(spec.memory_estimate(cfg, engine), list) and spec.step_flops(cfg, engine) >= 0
    spec.check_resources(cfg, engine)
    assert isinstance(spec.setup_key(cfg), tuple)
    assert set(registry.own_keys(name)) <= set(Config().to_dict())


@pytest.mark.parametrize("name", MODELS)
def test_stepper_has_what_the_recorder_reads(name):
    st, ds = _stepper(name)
    assert isinstance(st, Stepper)
    n = ds.y.size
    assert st.fit_since.shape == (n,) and st.S_acc.shape == (n,)
    obs = st.observe()
    assert obs.s.shape == obs.z.shape == (n, ds.X.shape[1] if ds.X is not None else obs.s.shape[1])
    assert obs.f.shape == (n,) and np.isfinite(obs.loss)
    assert st.relevant_increments(obs.s).shape == (n,)
    assert all(isinstance(v, float) for v in st.extra_metrics().values())


@pytest.mark.parametrize("name", MODELS)
def test_two_short_advances_equal_one_long(name):
    a, _ = _stepper(name)
    b, _ = _stepper(name)
    assert a.advance(0, 3) == (Outcome.FINISHED, 3) and a.advance(3, 5) == (Outcome.FINISHED, 8)
    assert b.advance(0, 8) == (Outcome.FINISHED, 8)
    for k, v in a.final_state().items():
        np.testing.assert_allclose(v, b.final_state()[k], rtol=1e-12, atol=1e-15, err_msg=k)
    np.testing.assert_array_equal(a.fit_since, b.fit_since)
    np.testing.assert_allclose(a.S_acc, b.S_acc, rtol=1e-12)


@pytest.mark.parametrize("name", MODELS)
def test_snapshot_and_restore_round_trip(name):
    st, _ = _stepper(name)
    st.advance(0, 4)
    snap = st.snapshot()
    before = {k: v.copy() for k, v in st.final_state().items()}
    records = st.fit_since.copy(), st.S_acc.copy()
    st.advance(4, 6)
    after = {k: v.copy() for k, v in st.final_state().items()}
    st.restore(snap)
    for k, v in st.final_state().items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)
    np.testing.assert_array_equal(st.fit_since, records[0])
    np.testing.assert_array_equal(st.S_acc, records[1])
    st.advance(4, 6)  # the same steps again, from the restored state
    for k, v in st.final_state().items():
        np.testing.assert_allclose(v, after[k], rtol=1e-12, atol=1e-15, err_msg=k)


@pytest.mark.parametrize("name", MODELS)
def test_check_grad_passes(name):
    check = registry.spec(name).check_grad(Config(model=name), 0, 1e-6)
    assert isinstance(check, GradCheck) and check.heading
    worst = max(e["rel"] for errs in check.errors.values() for e in errs.values())
    assert worst < GRAD_TOL


def test_every_outcome_has_its_message():
    assert Outcome(0) is Outcome.FINISHED and [int(o) for o in Outcome] == [0, 1, 2, 3]
    assert Outcome.DIVERGED.message(12, lr=0.5) == (
        "diverged at step 12: the training loss or a parameter norm is not finite (reduce lr=0.5)"
    )
    assert Outcome.FROZEN.message(7).startswith("frozen after step 7: every gradient underflows to 0")
    assert "exp(-745)" in Outcome.FROZEN.message(7, normalized=True)
    assert Outcome.STALLED.message(3, detail="gradient flow stalled") == "gradient flow stalled"


def test_a_model_added_only_through_the_recipe_runs_everywhere(tmp_path):
    """The toy model (tests/toymodel: keys.py, spec.py) and one registry line: a run
    with its own key, a sweep over it, check-grad and `attnsim keys`, with nothing
    of it in config, run, sweep or cli."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from attnsim import registry
        registry.MODELS["toy"] = registry.Entry("toymodel")  # the one registry line
        import attnsim
        from attnsim.cli import main
        from attnsim.sweep import parse_sweep, run_sweep
        r = attnsim.simulate({{"model": "toy", "toy_scale": 0.5, "steps": 30, "log_every": 10}})
        assert r.config["toy_scale"] == 0.5 and r.final["train_loss"] < r.trajectory["train_loss"][0]
        assert r.final["regime"] == "fitted" and r.final["generalized"] is None  # no error measure
        base = {{"model": "toy", "steps": 10}}
        grid = {{"toy_scale": [0.5, 2.0]}}
        spec = parse_sweep({{"sweep": {{"name": "toy", "seeds": [0]}}, "base": base, "grid": grid}})
        recs = run_sweep(spec, {str(tmp_path)!r}, workers=1, progress=False).records()
        assert [x["status"] for x in recs] == ["ok", "ok"]
        assert main(["check-grad", "--set", "model=toy"]) == 0
        assert main(["keys"]) == 0
        try:
            attnsim.simulate({{"model": "attention", "toy_scale": 2.0}})
        except attnsim.ConfigError as exc:
            assert "toy_scale: applies to model=toy only" in str(exc)
        else:
            raise AssertionError("a foreign key was accepted")
        print("toy ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "toy ok" in out.stdout, out.stdout + out.stderr
    assert "toy_scale" in out.stdout and "the head's initial scale" in out.stdout
