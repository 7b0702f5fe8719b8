"""One conformance suite over every registered model (as diffrax tests every solver
through one list, and SciPy runs every method in METHODS on the same problems): the
interface of attnsim/models/base.py, what the recorder reads, steps in pieces, snapshots,
the gradients the steppers apply against central differences in every engine; what a model
declares is honoured (each declared capability changes the run, each own key moves it), what
it does not declare is refused in one line (capabilities, and every common key it does not
read), and what it reports is checked (every declared metric finite, every array it writes
declared, no name colliding). A model is tested here the moment its registry line exists; a
toy model added only through the recipe runs through this suite in a process of its own
(ATTNSIM_TEST_TOY, tests/conftest.py), and each deliberate fault of the toy fails it."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/toymodel

from attnsim import registry
from attnsim.cli import main
from attnsim.config import KEYS, CommonKeys, Config, ConfigError
from attnsim.data.dataset import make_streams
from attnsim.models.base import GRAD_TOL, ClassifierStepper, GradCheck, ModelSpec, Outcome, Stepper
from attnsim.models.gradcheck import check_applied
from attnsim.run import simulate
from attnsim.runtime.workspace import Workspace

MODELS = list(registry.MODELS)
TESTS = Path(__file__).resolve().parent


def _stepper(name: str, **over):
    spec = registry.spec(name)
    cfg = Config(**{**spec.warm_configs["gd"], "steps": 20, **over})
    engine, reason = spec.plan(cfg, user_data=False)
    problem, ds = spec.build(cfg, None, make_streams(cfg.seed), engine, reason, Workspace())
    if not spec.classifier:  # no labels, no relevant tokens: the stepper of its problem
        return problem.stepper(cfg), ds
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
    if not registry.spec(name).classifier:  # its own recorder reads extra_metrics: every metric it declares
        assert not isinstance(st, ClassifierStepper) and not hasattr(st, "fit_since")
        metrics = st.extra_metrics()
        assert metrics and all(isinstance(v, float) for v in metrics.values())
        declared = set(registry.MODELS[name].metrics)
        assert set(metrics) <= declared
        res = simulate(registry.spec(name).warm_configs["gd"])
        assert set(res.final) == declared and set(metrics) <= set(res.trajectory)
        return
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
    if registry.spec(name).classifier:
        np.testing.assert_array_equal(a.fit_since, b.fit_since)
        np.testing.assert_allclose(a.S_acc, b.S_acc, rtol=1e-12)


@pytest.mark.parametrize("name", MODELS)
def test_snapshot_and_restore_round_trip(name):
    st, _ = _stepper(name)
    st.advance(0, 4)
    snap = st.snapshot()
    before = {k: v.copy() for k, v in st.final_state().items()}
    classifier = registry.spec(name).classifier
    records = (st.fit_since.copy(), st.S_acc.copy()) if classifier else None
    st.advance(4, 6)
    after = {k: v.copy() for k, v in st.final_state().items()}
    st.restore(snap)
    for k, v in st.final_state().items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)
    if classifier:
        np.testing.assert_array_equal(st.fit_since, records[0])
        np.testing.assert_array_equal(st.S_acc, records[1])
    st.advance(4, 6)  # the same steps again, from the restored state
    for k, v in st.final_state().items():
        np.testing.assert_allclose(v, after[k], rtol=1e-12, atol=1e-15, err_msg=k)


@pytest.mark.parametrize("name", MODELS)
def test_the_reference_gradients_match_central_differences(name):
    check = registry.spec(name).check_grad(Config(model=name), 0, 1e-6)
    assert isinstance(check, GradCheck) and check.heading
    worst = max(e["rel"] for errs in check.errors.values() for e in errs.values())
    assert worst < GRAD_TOL


@pytest.mark.parametrize("name", MODELS)
def test_the_gradient_each_stepper_applies_matches_central_differences(name):
    """What trains, not the reference: one GD step of each stepper form in every declared engine,
    its applied gradient (theta - theta') / lr against central differences of the objective."""
    check = check_applied(name)
    engines = {case.split("[")[1].split(",")[0].rstrip("]") for case in check.errors}
    assert engines == set(registry.MODELS[name].engines)
    for case, errs in check.errors.items():
        for block, e in errs.items():
            assert e["rel"] < GRAD_TOL, f"{name} {case} {block}: {e}"


AXES = {  # config key -> the registry entry's capability field
    "integrator": "integrators",
    "optimizer": "optimizers",
    "attention": "attentions",
    "precision_twin": "precision_twins",
    "data_model": "data_models",
}


def _undeclared(name: str) -> list[tuple[dict, str]]:
    """Every value of every capability some model (or optimizer) has that ``name`` does not
    declare: (keys, the key the refusal names)."""
    entry = registry.MODELS[name]
    probes = [({"engine": e}, "engine") for e in registry.engines() if e not in entry.engines]
    declared = {"optimizers": registry.optimizers_of(name)}
    for key, field in AXES.items():
        mine = declared.get(field, getattr(entry, field))
        probes += [({key: v}, key) for v in registry.capability(field) if v not in mine]
    for opt in registry.optimizers_of(name):  # a basis-dependent step in an engine that rotates the basis
        if registry.optimizer_class(opt).coordinatewise:
            rotated = [e for e in entry.engines if e not in entry.coordinate_engines]
            probes += [({"optimizer": opt, "engine": e}, "engine") for e in rotated]
    return probes


@pytest.mark.parametrize("name", MODELS)
def test_every_undeclared_capability_is_refused_in_one_line(name, capsys, tmp_path):
    """Config validation refuses every capability the model's registry entry does not declare,
    naming the key, before any work; the command line exits 2 with one line."""
    base = registry.spec(name).warm_configs["gd"]
    probes = _undeclared(name)
    assert probes or name == "attention"  # the attention model runs every engine and integrator
    for keys, key in probes:
        with pytest.raises(ConfigError, match=rf"^{key}: ") as exc:
            Config(**{**base, "model": name, **keys})
        assert "\n" not in str(exc.value)
        sets = [x for k, v in {**base, "model": name, **keys}.items() for x in ("--set", f"{k}={v}")]
        assert main(["run", *sets, "--out", str(tmp_path / "r")]) == 2, keys
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"attnsim: error: {key}: ") and "\n" not in err, err
        assert not (tmp_path / "r").exists()


def test_a_data_source_a_model_does_not_declare_is_refused(tmp_path):
    from attnsim.config_rules import check_data_source

    for name, entry in registry.MODELS.items():
        for source in ("file", "real"):
            if source in entry.data_sources:
                check_data_source(name, source)
            else:
                with pytest.raises(ConfigError, match=rf"^data: model={name} does not run on"):
                    check_data_source(name, source)


# a second allowed value of every common key: the first candidate away from the model's default
CANDIDATES = {
    "n": (6, 8), "T": (5, 3), "d": (9, 11), "signal_norm": (3.0, 4.0), "sigma": (0.7, 0.8), "rho": (0.3, 0.2),
    "n_relevant": (2, 1), "n_weak_aligned": (0, 1), "n_weak_opposite": (0, 1), "shuffle_roles": (True,),
    "noise_rate": (0.4, 0.3), "label_noise": ("exact",), "lr": (0.02, 0.03), "steps": (3, 4),
    "train": ("p", "W,p"), "init_W": ("gaussian",), "init_W_scale": (0.3,), "init_p": ("gaussian",),
    "init_p_scale": (0.2,), "init_nu": ("zeros",), "loss": ("linear",), "seed": (1,), "test_n": (5, 3),
    "batch": (2,), "flow_method": ("DOP853",), "flow_rtol": (1e-6,), "flow_atol": (1e-9,),
    "log_scale": ("log",), "log_every": (2, 3), "log_points": (7,), "pop_log_points": (3,),
    "pop_points": (32, 64), "pop_seed": (5,), "benign_error": (0.2,), "gen_score": (0.3,),
    "clean_twin": (False, True), "refine_times": ("false",), "init_scale": (0.5, 0.3), "rank": (2,),
}  # fmt: skip


def _probe(cfg: Config, key: str):
    """A value of common ``key`` other than its default under ``cfg``'s model."""
    return next(v for v in CANDIDATES[key] if v != cfg.default(key))


def test_every_common_key_has_a_probe_and_a_role():
    """Each common key is either the framework's (decided by a capability, a label) or read by
    some model; the suite has a second value for each."""
    common = set(Config.common_keys())
    assert common - set(registry.FRAMEWORK) == set(CANDIDATES)
    read = {
        k
        for e in registry.MODELS.values()
        for k in (*e.reads, *(k for v in e.reads_with.values() for k in v))
    }
    assert read <= common and not read & set(registry.FRAMEWORK)
    for name, entry in registry.MODELS.items():
        assert not set(entry.hints) & set(registry.reads(name, "gd")), f"{name}: a hint for a key it reads"


@pytest.mark.parametrize("name", MODELS)
def test_every_common_key_a_model_does_not_read_is_refused_in_one_line(name, capsys, tmp_path):
    """Positive declarations: any common key outside the model's ``reads`` (under its gd
    integrator), set away from its default, is refused naming the key and the model, before any
    work; the command line exits 2 with one line."""
    base = {**registry.spec(name).warm_configs["gd"], "model": name}
    cfg = Config(**base)
    unread = [k for k in CANDIDATES if k not in registry.reads(name, "gd")]
    assert unread or name == "attention"  # the attention model reads every common key under some integrator
    for key in unread:
        keys = {**base, key: _probe(cfg, key)}
        with pytest.raises(ConfigError, match=rf"^{key}: ") as exc:
            Config(**keys)
        assert "\n" not in str(exc.value)
        if key not in ("init_W_scale", "init_p_scale", "batch"):  # their own rules speak first
            assert f"model={name}" in str(exc.value), exc.value
        sets = [x for k, v in keys.items() for x in ("--set", f"{k}={_cli(v)}")]
        assert main(["run", *sets, "--out", str(tmp_path / "r")]) == 2, keys
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"attnsim: error: {key}: ") and "\n" not in err, err
        assert not (tmp_path / "r").exists()


def _cli(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


@pytest.mark.parametrize("name", MODELS)
def test_keys_read_only_under_a_condition_are_refused_without_it(name, capsys):
    """A flow's tolerances with discrete steps, log_points with a linear grid, log_every with a
    geometric one: refused for every model (one line, exit 2)."""
    base = {**registry.spec(name).warm_configs["gd"], "model": name}
    probes = [({"flow_rtol": 1e-6}, "flow_rtol"), ({"flow_method": "DOP853"}, "flow_method"),
              ({"log_points": 7, "log_scale": "linear"}, "log_points"),
              ({"log_every": 3, "log_scale": "log"}, "log_every")]  # fmt: skip
    for keys, key in probes:
        with pytest.raises(ConfigError, match=rf"^{key}: "):
            Config(**{**base, **keys})
        sets = [x for k, v in {**base, **keys}.items() for x in ("--set", f"{k}={v}")]
        assert main(["run", *sets]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"attnsim: error: {key}: ") and "\n" not in err, err


def _fingerprint(res) -> dict:
    """What a run reports: its final metrics and sections, and its trajectory arrays' bytes."""
    arrays = {k: np.asarray(v).tobytes() for k, v in res.trajectory.items()}
    return {"final": repr(res.final), "limit": repr(res.limit), "precision": repr(res.precision),
            "arrays": arrays}  # fmt: skip


def _own_key_cases(name: str):
    for f in registry.key_fields(name):
        probe = f.metadata.get("probe")
        yield f.name, probe if isinstance(probe, dict) else {f.name: probe}


@pytest.mark.parametrize("name", MODELS)
def test_each_own_key_moves_the_run(name):
    """Every key the model owns is read: the warm run at the key's probe value (its field's
    ``metadata["probe"]``: a second allowed value, or the keys to run it with) differs from
    the same run at the key's default."""
    base = registry.spec(name).warm_configs["gd"]
    for key, probe in _own_key_cases(name):
        assert probe[key] is not None, f"{name}: own key {key} has no probe value in its metadata"
        at = simulate({**base, **probe})
        default = simulate({**base, **probe, key: registry.own_keys(name)[key]})
        assert _fingerprint(at) != _fingerprint(default), f"{name}: {key}={probe[key]} does not move the run"


def _declared_cases(name: str):
    """(axis, value, keys of the run with it, keys of the same run without it) for every
    capability the model declares beyond its default."""
    spec, entry = registry.spec(name), registry.MODELS[name]
    base = {**spec.warm_configs["gd"], "model": name}
    for integrator in entry.integrators:
        if integrator != "gd":
            run = {**spec.warm_configs[integrator], "model": name}
            yield "integrator", integrator, run, {**run, "integrator": "gd", "batch": 0}
    for opt in registry.optimizers_of(name):
        if opt != "gd":
            need = {"train": "W,p"} if "p" in registry.optimizer_class(opt).needs else {}
            yield "optimizer", opt, {**base, **need, "optimizer": opt}, {**base, **need}
    default = Config(**base)
    for attention in entry.attentions:
        if attention != default.attention:
            yield "attention", attention, {**base, "attention": attention}, base
    for twin in entry.precision_twins:
        if twin != "none":
            yield "precision_twin", twin, {**base, "precision_twin": twin}, base
    for init in entry.inits[1:]:  # the first is the model's default
        yield "init", init, {**base, "init": init}, base
    for data_model in entry.data_models:
        if data_model != "sakamoto2025":
            roles = {"T": 2, "n_weak_aligned": 0, "n_weak_opposite": 0}
            yield "data_model", data_model, {**base, **roles, "data_model": data_model}, {**base, **roles}
    for engine in entry.engines:
        implicit = {"init_W": "gaussian", "d": base["n"] * base["T"] + 8} if engine == "implicit" else {}
        keys = {**base, "engine": engine, **implicit}
        yield "engine", engine, keys, None


@pytest.mark.parametrize("name", MODELS)
def test_every_declared_capability_is_honoured(name):
    """Each declared integrator, optimizer, attention, precision twin, initialization and data
    model changes the warm run (a model that declares one and ignores it runs the default bit for
    bit); a float64 twin matches its run (its closed form); each declared engine is the one used."""
    for axis, value, keys, without in _declared_cases(name):
        res = simulate(keys)
        if axis == "engine":
            assert res.engine["used"] == value, f"{name}: engine={value} ran {res.engine['used']}"
            continue
        if axis == "precision_twin":
            twin = res.trajectory.get("twin_train_loss")
            assert res.precision and res.precision["dtype"] == value and twin is not None, (name, value)
            exact = res.trajectory["train_loss"]
            if value == "float64":  # the twin's own operation order: the run, to rounding
                np.testing.assert_allclose(twin, exact, rtol=1e-12)
            else:
                assert not np.array_equal(twin, exact), f"{name}: the {value} twin equals the run"
            continue
        assert _fingerprint(res) != _fingerprint(simulate(without)), f"{name}: {axis}={value} changes nothing"


@pytest.mark.parametrize("name", MODELS)
def test_every_declared_metric_is_finite_and_every_array_declared(name):
    """After the warm run every metric the model declares is in result.json's final and
    finite, and (a model with metrics of its own) every array its recorder wrote is declared."""
    entry = registry.MODELS[name]
    res = simulate(registry.spec(name).warm_configs["gd"])
    for metric in entry.metrics:
        v = res.final.get(metric)
        values = v if isinstance(v, list) else [v]  # a list-valued metric (plateaus visited): each finite
        ok = all(isinstance(x, (int, float)) and np.isfinite(x) for x in values)
        assert ok, f"{name}: declared metric {metric} = {v!r}"
    written = set(res.trajectory) - {"step"}
    if registry.spec(name).classifier:
        from attnsim.metric_names import CLASSIFIER_ARRAYS, CLASSIFIER_METRICS, TWIN_PREFIX

        known = set(CLASSIFIER_METRICS) | set(CLASSIFIER_ARRAYS) | set(entry.metrics)
        assert {k for k in written | set(res.final) if not k.startswith(TWIN_PREFIX)} <= known
    else:
        saved = written - set(res.final)  # arrays the findings save beside the trajectory (not metrics)
        recorded = {k for k in written if len(res.trajectory[k]) == len(res.trajectory["step"])} - saved
        assert recorded <= set(entry.metrics), recorded - set(entry.metrics)
        assert set(res.final) == set(entry.metrics)


def test_a_classifier_run_writes_the_names_metric_names_lists():
    """attnsim.metric_names lists what a classifier run writes (what other models' metric
    names are checked against): an attention run with the limit and a test set, and the encoder."""
    from attnsim.metric_names import CLASSIFIER_ARRAYS, CLASSIFIER_METRICS

    res = simulate({"n": 6, "T": 4, "d": 30, "steps": 5, "test_n": 4, "limit": True, "pop_points": 64})
    enc = simulate(registry.spec("encoder").warm_configs["gd"])
    written = set(res.trajectory) | set(res.final) | set(enc.trajectory) | set(enc.final)
    listed = set(CLASSIFIER_METRICS) | set(CLASSIFIER_ARRAYS)
    assert written <= listed, written - listed
    assert listed - written == {"clean_twin"}  # written only when a run has no clean-label twin's error


def _clashes(metrics: dict) -> list[str]:
    """The collisions a model declaring ``metrics`` would bring (its keys: the encoder's, left out)."""
    registry.MODELS["clash"] = registry.Entry("attnsim.models.encoder", metrics=metrics)
    try:
        return [c for c in registry.key_collisions(Config.common_keys()) if c.split(":")[0] in metrics]
    finally:
        del registry.MODELS["clash"]


def test_a_metric_colliding_with_a_key_a_classifier_name_or_another_model_is_refused():
    for metrics, word in (
        ({"sigma": "the noise"}, "sigma: a metric of model=clash and a config key"),
        (
            {"train_loss": "the summed loss"},
            "train_loss: a metric of model=clash ('the summed loss') and the ",
        ),
        ({"gen_error": "something else"}, "gen_error: a metric of model="),
        ({"twin_x": "a twin"}, "twin_x: a metric of model=clash"),
    ):
        found = _clashes(metrics)
        assert found and any(c.startswith(word) for c in found), found
    from attnsim.metric_names import SHARED

    assert _clashes({"train_loss": SHARED["train_loss"]}) == []  # the same name with the same meaning
    with pytest.raises(ValueError, match=r"names declared twice: .*gen_error: a metric of model="):
        registry.register("clash", registry.Entry("attnsim.models.encoder", metrics={"gen_error": "x"}), ())
    assert "clash" not in registry.MODELS


def test_an_integrator_declared_without_a_stepper_is_refused_when_the_spec_loads():
    import dataclasses

    entry = registry.MODELS["encoder"]
    try:
        registry.MODELS["encoder"] = dataclasses.replace(entry, integrators=("gd", "flow"))
        registry._checked_spec.cache_clear()
        with pytest.raises(RuntimeError, match=r"^model=encoder declares integrator flow .* has no stepper"):
            registry.spec("encoder")
    finally:
        registry.MODELS["encoder"] = entry
        registry._checked_spec.cache_clear()
    assert registry.spec("encoder").integrators == ("gd",)


def test_no_two_owners_declare_one_key_and_a_collision_is_refused_by_name():
    common = tuple(f.name for f in __import__("dataclasses").fields(CommonKeys))
    assert registry.key_collisions(common) == []
    clash = registry.Entry("attnsim.models.encoder")  # declares the encoder's keys a second time
    with pytest.raises(ValueError, match=r"model 'twin_encoder': names declared twice: mlp_dim: "):
        registry.register("twin_encoder", clash, common)
    assert "twin_encoder" not in registry.MODELS  # refused before the registry changed
    assert len(set(KEYS)) == len(KEYS)


def test_every_outcome_has_its_message():
    assert Outcome(0) is Outcome.FINISHED and [int(o) for o in Outcome] == [0, 1, 2, 3]
    assert Outcome.DIVERGED.message(12, lr=0.5) == (
        "diverged at step 12: the training loss or a parameter norm is not finite (reduce lr=0.5)"
    )
    assert Outcome.FROZEN.message(7).startswith("frozen after step 7: every gradient underflows to 0")
    assert "exp(-745)" in Outcome.FROZEN.message(7, normalized=True)
    assert Outcome.STALLED.message(3, detail="gradient flow stalled") == "gradient flow stalled"


def _toy_suite(kind: str) -> subprocess.CompletedProcess:
    """This module's suite on the toy model alone, in a process where it is registered."""
    env = dict(os.environ, ATTNSIM_TEST_TOY=kind)
    cmd = [sys.executable, "-m", "pytest", str(Path(__file__)), "-q", "-p", "no:cacheprovider", "-n", "0",
           "-k", "toy"]  # fmt: skip
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=TESTS.parent)


# each fault of the toy (tests/toymodel/spec.py FAULTS) and the test of the suite that must catch it
MUTATIONS = {
    "wrong_kernel": "test_the_gradient_each_stepper_applies_matches_central_differences[toy]",
    "ignored_capability": "test_every_declared_capability_is_honoured[toy]",
    "no_stepper": "test_spec_declares_the_interface[toy]",
    "colliding_metric": None,  # the registry line itself is refused: no test module imports
    "unread_key": "test_each_own_key_moves_the_run[toy]",
    "unfilled_metric": "test_every_declared_metric_is_finite_and_every_array_declared[toy]",
}


@pytest.mark.skipif(bool(os.environ.get("ATTNSIM_TEST_TOY")), reason="the toy's own process")
def test_the_suite_passes_a_toy_model_added_through_the_recipe():
    """The conformance suite is the toy's the moment its registry line exists."""
    right = _toy_suite("right")
    assert right.returncode == 0, right.stdout[-3000:] + right.stderr[-2000:]
    assert " passed" in right.stdout and "failed" not in right.stdout


@pytest.mark.skipif(bool(os.environ.get("ATTNSIM_TEST_TOY")), reason="the toy's own process")
@pytest.mark.parametrize("fault", MUTATIONS)
def test_the_suite_fails_a_toy_with_each_deliberate_fault(fault):
    """The mutation tests: one fault per class of the contract, each failing the suite by the test
    that guards it. A gradient kernel 10 % off in one coordinate (its reference, which check_grad
    reads, still right) fails the applied-gradient test and only it; a declared capability the
    toy ignores, an integrator without a stepper, a metric of another's name, an own key never
    read and a metric never filled each fail theirs."""
    from toymodel.spec import FAULTS

    assert set(MUTATIONS) == set(FAULTS)
    out = _toy_suite(fault)
    text = out.stdout[-6000:] + out.stderr[-3000:]
    assert out.returncode != 0, text
    failed = [line for line in out.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    guard = MUTATIONS[fault]
    if guard is None:
        assert (
            "gen_error: a metric of model=toy ('the smallest margin') and of model=positional_semantic"
            in text
        )
        return
    assert any(f"::{guard}" in line for line in failed), text
    if fault == "wrong_kernel":
        assert len(failed) == 1, text


def test_a_model_added_only_through_the_recipe_runs_everywhere(tmp_path):
    """The toy model (tests/toymodel: keys.py, spec.py) and one registry line: a run
    with its own key and its own metric in result.json, records.csv and load_sweep, a sweep
    over its key, check-grad and `attnsim keys`, with nothing of it in config, run, sweep or cli."""
    script = textwrap.dedent(f"""
        import csv, json, sys
        sys.path.insert(0, {str(TESTS)!r})
        from attnsim import registry
        from toymodel.spec import TOY_ENTRY
        registry.register("toy", TOY_ENTRY)  # the one registry line
        import attnsim
        from attnsim.cli import main
        from attnsim.sweep import parse_sweep, run_sweep
        r = attnsim.simulate({{"model": "toy", "toy_scale": 0.5, "steps": 30, "log_every": 10}})
        assert r.config["toy_scale"] == 0.5 and r.final["train_loss"] < r.trajectory["train_loss"][0]
        assert r.final["regime"] == "fitted" and r.final["generalized"] is None  # no error measure
        assert r.final["toy_margin"] == r.trajectory["toy_margin"][-1] > 0  # its own metric, declared
        out = {str(tmp_path / "run")!r}
        assert main(["run", "--set", "model=toy", "--set", "steps=20", "--out", out]) == 0
        saved = json.load(open(out + "/result.json"))
        assert saved["final"]["toy_margin"] > 0
        m = attnsim.simulate({{"model": "toy", "optimizer": "normalized", "steps": 10}})  # a plug-in
        assert m.final["train_loss"] < m.trajectory["train_loss"][0]
        base = {{"model": "toy", "steps": 10}}
        grid = {{"toy_scale": [0.5, 2.0]}}
        spec = parse_sweep({{"sweep": {{"name": "toy", "seeds": [0], "save": ["toy_margin"]}}, "base": base,
                             "grid": grid}})
        recs = run_sweep(spec, {str(tmp_path)!r}, workers=1, progress=False).records()
        assert [x["status"] for x in recs] == ["ok", "ok"]
        rows = list(csv.DictReader(open({str(tmp_path / "toy" / "records.csv")!r})))
        assert all(float(row["toy_margin"]) for row in rows) and len(rows) == 2
        table = attnsim.load_sweep({str(tmp_path / "toy")!r})
        assert table["toy_margin"].notna().all()
        assert main(["plot", {str(tmp_path / "toy")!r}, "--metric", "toy_margin", "--x", "toy_scale"]) == 0
        assert main(["check-grad", "--set", "model=toy"]) == 0
        assert main(["keys"]) == 0
        for bad, word in (({{"model": "attention", "toy_scale": 2.0}}, "toy_scale: applies to model=toy"),
                          ({{"model": "toy", "engine": "reduced"}}, "engine: model=toy does not run"),
                          ({{"model": "toy", "integrator": "flow"}}, "integrator: model=toy does not run")):
            try:
                attnsim.simulate(bad)
            except attnsim.ConfigError as exc:
                assert word in str(exc), exc
            else:
                raise AssertionError(f"accepted: {{bad}}")
        print("toy ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "toy ok" in out.stdout, out.stdout + out.stderr
    assert "toy_scale" in out.stdout and "the head's initial scale" in out.stdout
