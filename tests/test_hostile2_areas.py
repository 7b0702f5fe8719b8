"""The areas the second hostile pass did not reach, tried and held: the newer models' sweeps on
threads, killed and resumed; damaged files of every model; the Python API used carelessly
(matrices as arrays, lists changed after Config, threads calling simulate at once, wrong types);
signals while a newer model trains; NUMBA_DISABLE_JIT=1; unicode and very long paths."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import attnsim
from attnsim.cli import main
from attnsim.config import Config, ConfigError
from attnsim.sweep.run import run_sweep
from attnsim.sweep.spec import parse_sweep

# one small warm config per model (seconds at most, every model's own path)
SMALL = {
    "attention": {"n": 6, "T": 4, "d": 20, "steps": 5, "pop_points": 64},
    "positional_semantic": {
        "model": "positional_semantic",
        "d": 20,
        "alpha": 1,
        "steps": 5,
        "pop_points": 64,
    },  # fmt: skip
    "single_location": {"model": "single_location", "d": 20, "T": 4, "n": 40, "steps": 5, "integrator": "gd"},
    "linear_icl": {"model": "linear_icl", "d": 6, "steps": 5, "integrator": "gd"},
    "linear_attention": {"model": "linear_attention", "d": 3, "steps": 5},
    "encoder": {"model": "encoder", "n": 6, "T": 4, "d": 16, "steps": 5, "mlp_dim": 8, "test_n": 20},
}


def _sets(cfg):
    return [a for k, v in cfg.items() for a in ("--set", f"{k}={v}")]


def _ps_spec(name="ps", seeds=3):
    base = {k: v for k, v in SMALL["positional_semantic"].items()}
    return parse_sweep({"sweep": {"name": name, "seeds": seeds}, "base": base, "grid": {"omega": [0.2, 0.6]}})


def _finals(records):
    return {json.dumps(r["config"], sort_keys=True): r["final"] for r in records}


# -- sweeps of the newer models ---------------------------------------------------------------


def test_a_positional_semantic_sweep_on_threads_records_what_a_sequential_one_does(tmp_path):
    seq = run_sweep(_ps_spec(), tmp_path / "seq", workers=1, progress=False).records()
    with ThreadPoolExecutor(max_workers=2) as pool:
        thr = run_sweep(_ps_spec(), tmp_path / "thr", executor=pool, progress=False).records()
    assert len(seq) == 6 and _finals(seq) == _finals(thr)


_KILLED = """
import sys
from attnsim.sweep import parse_sweep, run_sweep
spec = parse_sweep({"sweep": {"name": "k", "seeds": 30},
                    "base": {"model": "positional_semantic", "d": 40, "alpha": 1, "steps": 300,
                             "pop_points": 256},
                    "grid": {"omega": [0.3]}})
rep = run_sweep(spec, sys.argv[1], workers=1, progress=False)
print("computed", rep.computed, "ok", rep.ok)
"""


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_positional_semantic_sweep_killed_resumes_without_recomputing(tmp_path, how):
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    recdir = tmp_path / "k" / "records"
    deadline = time.time() + 300
    while time.time() < deadline and (not recdir.exists() or len(list(recdir.glob("*.json"))) < 2):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    os.killpg(proc.pid, how)
    proc.communicate(timeout=120)
    first = {p.name: p.read_bytes() for p in recdir.glob("*.json")}
    assert 2 <= len(first) < 30
    if how == signal.SIGTERM:  # the sweep stops its worker and tidies; SIGKILL may leave a temporary
        assert not list(recdir.glob("*.tmp*"))
    for text in first.values():
        json.loads(text)  # nothing half-written
    out = subprocess.run([sys.executable, "-c", _KILLED, str(tmp_path)], capture_output=True, text=True,
                         timeout=600).stdout  # fmt: skip
    after = {p.name: p.read_bytes() for p in recdir.glob("*.json")}
    assert len(after) == 30 and f"computed {30 - len(first)} ok 30" in out, out
    assert all(after[name] == data for name, data in first.items())
    assert not list(recdir.glob("*.tmp*"))  # a killed write's temporary is gone once its point is done


# -- damaged files of every model -------------------------------------------------------------


@pytest.mark.parametrize("model", list(SMALL))
def test_damaged_run_files_of_every_model_are_named_in_one_line(tmp_path, capsys, model):
    out = tmp_path / "r"
    assert main(["run", "--out", str(out), "--quiet", *_sets(SMALL[model])]) == 0
    (out / "trajectory.npz").write_bytes(b"PK\x03\x04 not a zip")
    assert main(["plot", str(out), "--out", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trajectory.npz" in err[0] and "Traceback" not in err[0], err
    (out / "result.json").write_text('{"config": {"model": ')
    assert main(["run", str(out), "--out", str(tmp_path / "again")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "result.json" in err[0] and "damaged" in err[0], err


NEWER = ["positional_semantic", "single_location", "linear_icl", "linear_attention"]


@pytest.mark.parametrize("model", NEWER)
def test_a_damaged_record_of_a_newer_model_is_moved_aside_and_recomputed(tmp_path, model):
    base = {k: v for k, v in SMALL[model].items() if k != "steps"}
    spec = parse_sweep({"sweep": {"name": "s", "seeds": 2}, "base": base, "grid": {"steps": [5]}})
    first = run_sweep(spec, tmp_path, workers=1, progress=False)
    records = sorted(first.store.dir.glob("*.json"))
    records[0].write_text('{"status": "ok", "final": ')  # a record cut mid-write by another tool
    again = run_sweep(spec, tmp_path, workers=1, progress=False)
    assert again.computed == 1 and again.ok == 2
    assert _finals(again.records()) == _finals(first.records())
    assert len(list((first.store.dir / "damaged").iterdir())) == 1


def test_a_damaged_sweep_json_is_named_in_one_line(tmp_path, capsys):
    run_sweep(_ps_spec(seeds=1), tmp_path, workers=1, progress=False)
    (tmp_path / "ps" / "sweep.json").write_text("{")
    assert main(["plot", str(tmp_path / "ps")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sweep.json" in err[0], err


# -- the Python API, used carelessly -------------------------------------------------------------


def test_matrix_keys_take_arrays_and_a_list_changed_after_config_changes_nothing():
    A = [[0.6, 0.4], [0.4, 0.6]]
    cfg = Config(model="positional_semantic", d=20, alpha=1, steps=5, pop_points=64, teacher_A=A)
    A[0][0] = 99.0  # the caller's list, changed afterwards
    assert cfg.teacher_A == ((0.6, 0.4), (0.4, 0.6))
    arr = Config(model="positional_semantic", d=20, alpha=1, steps=5, pop_points=64,
                 teacher_A=np.array([[0.6, 0.4], [0.4, 0.6]]))  # fmt: skip
    assert arr == cfg.replace() and arr.hash() == cfg.hash()


@pytest.mark.parametrize(
    "keys, word",
    [
        ({"d": "twenty"}, "d"),
        ({"steps": [5]}, "steps"),
        ({"alpha": "one"}, "alpha"),
        ({"omega": None}, "omega"),
    ],  # fmt: skip
)
def test_wrong_types_in_the_python_api_are_config_errors_naming_the_key(keys, word):
    with pytest.raises(ConfigError, match=word):
        attnsim.simulate({**SMALL["positional_semantic"], **keys})


def test_threads_calling_simulate_at_once_get_what_one_call_gets():
    models = ("attention", "positional_semantic", "single_location")
    cfgs = [{**SMALL[m], "seed": k} for m in models for k in (0, 1)]
    alone = [attnsim.simulate(c).final for c in cfgs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(lambda c: attnsim.simulate(c).final, cfgs))
    assert json.dumps(together, sort_keys=True, default=str) == json.dumps(alone, sort_keys=True, default=str)


# -- signals while a newer model trains; NUMBA_DISABLE_JIT; paths ------------------------------


@pytest.mark.parametrize(
    "cfg",
    [
        {**SMALL["positional_semantic"], "d": 300, "steps": 100000},
        {**SMALL["positional_semantic"], "d": 300, "steps": 100000, "optimizer": "adam", "lr": 0.01},
        {**SMALL["single_location"], "d": 400, "n": 4000, "steps": 100000},
    ],
    ids=["ps-gd", "ps-adamw", "single-location"],
)
def test_ctrl_c_while_a_newer_model_trains_stops_in_one_line_and_writes_nothing(tmp_path, cfg):
    warm = subprocess.run([sys.executable, "-m", "attnsim.cli", "run", "--out", "w", "--quiet",
                           *_sets({**cfg, "steps": 2})],
                          cwd=tmp_path, capture_output=True, timeout=600)  # fmt: skip
    assert warm.returncode == 0, warm.stderr
    proc = subprocess.Popen([sys.executable, "-m", "attnsim.cli", "run", "--out", "r", *_sets(cfg)],
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True)  # fmt: skip
    time.sleep(3.0)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "attnsim: interrupted", err
    assert not (tmp_path / "r").exists() and not list(tmp_path.rglob("*.tmp"))


def test_check_grad_of_every_model_stops_on_sigterm(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time, attnsim.cli as c; time.sleep(60)"])
    proc.send_signal(signal.SIGTERM)  # the interpreter's default before attnsim's handlers: a control
    proc.wait(timeout=30)
    for model in NEWER:
        done = subprocess.run([sys.executable, "-m", "attnsim.cli", "check-grad", "--set", f"model={model}"],
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0 and done.stdout.strip().splitlines()[-1].startswith("passed"), done.stdout


@pytest.mark.parametrize("model", ["attention", "positional_semantic", "linear_icl"])
def test_numba_disable_jit_runs_the_same_numbers(tmp_path, model):
    """With NUMBA_DISABLE_JIT=1 the kernels run as Python: slower, the same results."""
    cfg = SMALL[model]
    jit = attnsim.simulate(cfg).final
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    done = subprocess.run([sys.executable, "-m", "attnsim.cli", "run", "--out", "r", "--quiet", *_sets(cfg)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    final = json.loads((tmp_path / "r" / "result.json").read_text())["final"]
    for key, v in jit.items():
        if isinstance(v, float) and np.isfinite(v):
            assert final[key] == pytest.approx(v, rel=1e-9, abs=1e-300), key


@pytest.mark.parametrize("name", ["ünï çødé/ß", "/".join(["a" * 200] * 5), "spaces and 'quotes'"])
def test_unicode_and_long_output_paths_hold(tmp_path, name):
    out = tmp_path / name
    assert main(["run", "--out", str(out), "--quiet", *_sets(SMALL["positional_semantic"])]) == 0
    assert attnsim.load(out).config["model"] == "positional_semantic"
    assert main(["plot", str(out)]) == 0 and (out / "plot.png").stat().st_size > 0


def test_a_name_longer_than_the_filesystem_takes_is_one_line(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path / ("b" * 300)), *_sets(SMALL["attention"])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "longer than 255 bytes" in err[0], err


def test_simulate_from_a_thread_while_the_main_thread_holds_signals():
    """simulate() off the main thread installs no signal handler (they belong to the main thread)."""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", attnsim.simulate(SMALL["linear_icl"])))
    t.start()
    t.join(timeout=300)
    assert "r" in box and np.isfinite(box["r"].final["e_icl"])
