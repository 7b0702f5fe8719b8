"""What attnsim says when it stops early or is handed something odd: each message names
the cause the run really had, once, and the command line survives its own streams."""

import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

from attnsim.cli import main
from attnsim.run import simulate
from attnsim.words import suggest

SMALL = {"n": 6, "T": 4, "d": 20, "steps": 20, "pop_points": 64}


def _npz(path, X, seed=0):
    rng = np.random.default_rng(seed)
    y = np.where(np.arange(X.shape[0]) % 2 == 0, 1.0, -1.0)
    np.savez(path, X=X, y=y, nu=rng.standard_normal(X.shape[2]))
    return str(path)


def _warnings_of(config, data=None):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = simulate(config, data)
    return res, [str(w.message) for w in caught]


def test_a_gradient_zero_by_construction_is_not_blamed_on_lr(tmp_path):
    res, said = _warnings_of({"steps": 20}, _npz(tmp_path / "zero.npz", np.zeros((6, 4, 10))))
    (frozen,) = [w for w in said if "frozen" in w]
    assert "no sample's scores are saturated" in frozen and "reduce lr" not in frozen
    _, said = _warnings_of({"preset": "magen2025", "train": "W,p", "steps": 10, "pop_points": 64})
    assert any("frozen after step 0" in w and "a smaller lr cannot help" in w for w in said), said


def test_huge_tokens_are_named_as_the_cause_of_a_frozen_run(tmp_path):
    X = np.random.default_rng(0).standard_normal((6, 4, 10)) * 2.0**63
    _, said = _warnings_of({"steps": 5}, _npz(tmp_path / "big.npz", X))
    (frozen,) = [w for w in said if "frozen" in w]
    assert "data's scale (largest |x| entry" in frozen and "rescale the tokens" in frozen


def test_a_run_and_its_clean_twin_say_a_warning_once_and_the_twin_says_who_it_is(capsys, tmp_path):
    args = ["run", "--set", "optimizer=adam", "--set", "steps=20", "--out", str(tmp_path / "r")]  # saturates
    assert main(args) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert err and len(err) == len(set(err)), err
    bare = [e.split("clean-label twin: ")[-1] for e in err]
    assert len(bare) == len(set(bare))  # the twin's copy of the run's own warning is not repeated


def test_a_toml_file_with_a_byte_order_mark_reads_and_choices_take_any_case(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbfsteps = 7\nn = 6\nd = 20\npop_points = 64\n")
    assert main(["run", str(path), "--preset", "Magen2025", "--out", str(tmp_path / "r"), "--quiet"]) == 0
    import json

    config = json.loads((tmp_path / "r" / "result.json").read_text())["config"]
    assert config["steps"] == 7 and config["data_model"] == "magen2025"
    from attnsim.data.real import builtin_name

    assert builtin_name("Digits") == "digits" and builtin_name(str(path)) == str(path)


@pytest.mark.parametrize("word", ["ñ", "a.b", "x"])
def test_no_typo_hint_for_a_key_nowhere_near_one(word):
    from attnsim.config import Config

    assert suggest(word, [f for f in Config.__dataclass_fields__]) is None
    assert suggest("signal_nrm", ["signal_norm", "sigma"]) == "signal_norm"


@pytest.mark.parametrize(
    "redirect,code,needle",
    [
        ("exec >&-", 0, ""),  # stdout closed: the run still saves its result
        ("exec >/dev/full", 1, "cannot write standard output: No space left on device"),
    ],
)
def test_the_command_line_survives_its_standard_output(redirect, code, needle, tmp_path):
    cmd = f"{redirect}; {sys.executable} -m attnsim.cli run --set steps=5 --set n=6 --out {tmp_path / 'r'}"
    done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert done.returncode == code and "Traceback" not in done.stderr, done.stderr
    assert needle in done.stderr and len(done.stderr.strip().splitlines()) <= 1, done.stderr
    assert (tmp_path / "r" / "result.json").is_file()
    piped = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m attnsim.cli keys | head -1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in piped.stderr and piped.stdout.startswith("key")


def test_two_threads_of_one_process_on_one_sweep_name_the_thread_not_a_process(tmp_path, capsys):
    from attnsim.sweep.run import run_sweep
    from attnsim.sweep.spec import parse_sweep

    base = {**SMALL, "steps": 150_000}
    spec = parse_sweep({"sweep": {"name": "t"}, "base": base, "grid": {"signal_norm": [2.0]}})
    done = []
    threads = [
        threading.Thread(target=lambda: done.append(run_sweep(spec, tmp_path, workers=1, progress=False)))
        for _ in range(2)
    ]
    threads[0].start()
    time.sleep(0.3)
    threads[1].start()
    for th in threads:
        th.join(120)
    assert len(done) == 2 and all(r.ok == 1 for r in done)
    err = capsys.readouterr().err
    assert "another thread of this process" in err and "another process" not in err, err


def test_the_compile_message_comes_with_a_compile_not_with_a_slow_load(monkeypatch):
    """A busy machine that loads the cached kernels slowly says nothing; a kernel of
    attnsim's that Numba compiles (its "numba:compile" event, Numba's public event API)
    says so, once; another library's compilation says nothing."""
    import types

    from numba.core import event

    import attnsim.run
    from attnsim.runtime.workspace import Workspace

    said = []
    monkeypatch.setattr(attnsim.run, "_warm_up", lambda *a: time.sleep(1.3) or 1.3)
    attnsim.run.ensure_compiled(announce=lambda: said.append("compiling"), workspace=Workspace())
    assert said == []  # the one-second timer said "compiling" here

    def compiling(module: str):
        fake = types.SimpleNamespace(py_func=types.SimpleNamespace(__module__=module))
        return event.trigger_event(
            "numba:compile", data={"dispatcher": fake, "args": (), "return_type": None}
        )

    def warm(*_):
        with compiling("somelibrary.kernels"):
            pass
        for _ in range(2):
            with compiling("attnsim.models.attention.kernels"):
                pass
        return 0.0

    monkeypatch.setattr(attnsim.run, "_warm_up", warm)
    attnsim.run.ensure_compiled(announce=lambda: said.append("compiling"), workspace=Workspace())
    assert said == ["compiling"]


def test_the_first_hour_conveniences(tmp_path, capsys):
    """simulate(**keys) and simulate("file.toml") with its data key, train as a list,
    run --seeds with one summary, --csv, the summary's words and times."""
    import json

    from attnsim import load_trajectories
    from attnsim.config import Config

    assert Config(train=["p", "W"]).train == "W,p"
    a = simulate(SMALL, steps=30)
    b = simulate({**SMALL, "steps": 30})
    assert json.dumps(a.final) == json.dumps(b.final) and a.config["steps"] == 30
    data = tmp_path / "d.npz"
    _npz(data, np.random.default_rng(1).standard_normal((6, 4, 10)))
    (tmp_path / "c.toml").write_text('data = "d.npz"\nsteps = 10\n')
    assert simulate(str(tmp_path / "c.toml")).data["file_sha256"]
    assert main(["run", str(tmp_path / "c.toml"), "--out", str(tmp_path / "f"), "--quiet"]) == 0
    assert json.loads((tmp_path / "f" / "result.json").read_text())["data"]["file_sha256"]
    sets = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]
    assert main(["run", *sets, "--seeds", "0-2", "--csv", "--out", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert "3 seeds (0-2): mean +- standard deviation over seeds" in out and "regimes:" in out
    rows = (tmp_path / "s" / "seed-1" / "trajectory.csv").read_text().splitlines()
    logged = np.load(tmp_path / "s" / "seed-1" / "trajectory.npz")["step"]
    assert rows[0].startswith("step,train_loss") and len(rows) == 1 + len(logged)
    assert main(["run", *sets, "--seeds", "0-2", "--set", "seed=3", "--out", str(tmp_path / "t")]) == 2
    assert main(["run", *sets, "--set", "optimizer=adam", "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "steps of AdamW" in out and "never (within" not in out and "at step never" not in out
    from attnsim.sweep.run import run_sweep
    from attnsim.sweep.spec import parse_sweep

    spec = parse_sweep(
        {"sweep": {"name": "tr", "save": ["train_loss"]}, "base": SMALL, "grid": {"lr": [1.0, 2.0]}}
    )
    run_sweep(spec, tmp_path, workers=1, progress=False)
    long = load_trajectories(tmp_path / "tr")
    assert len(long) == 2 * len(logged) and {"step", "train_loss", "config.lr"} <= set(long)


def test_a_slow_optimizer_gets_a_progress_bar_whatever_its_step_count(monkeypatch):
    import attnsim.driver

    made = []
    real = attnsim.driver._Bar

    class Seen(real):
        def __init__(self, *a, **k):
            made.append(a)
            super().__init__(*a, **k)

    monkeypatch.setattr(attnsim.driver, "_Bar", Seen)
    clock = iter(range(0, 10_000, 2))  # every chunk "takes" two seconds
    monkeypatch.setattr(attnsim.driver.time, "monotonic", lambda: float(next(clock)))
    simulate({**SMALL, "steps": 200}, progress=True)
    assert made and made[0][0] == 200  # 200 steps: no bar before (it needed 200 000)


def test_times_read_as_a_person_reads_them_and_the_limit_is_summarized():
    from attnsim.report import format_step, format_summary

    assert format_step(681.4658145592106) == "681.5" and format_step(682.0) == "682"
    res = simulate({**SMALL, "steps": 200, "limit": True, "train": "p", "init_W": "identity"})
    text = format_summary(res)
    assert "max-margin limit (p-SVM): population error" in text and "cos to the run's direction" in text


def test_a_signal_inside_an_import_ends_as_the_signal_not_as_a_traceback(monkeypatch, capsys):
    """Python wraps an exception raised in a class body's __set_name__ (a signal's, during an
    import such as platform's) in a RuntimeError: the command still ends as the signal."""
    import attnsim.cli

    def wrapped(*_):
        try:
            raise attnsim.cli.Terminated
        except attnsim.cli.Terminated as exc:
            raise RuntimeError("Error calling __set_name__") from exc

    monkeypatch.setattr(attnsim.cli, "_dispatch", wrapped)
    assert main(["keys"]) == 143 and "attnsim: terminated" in capsys.readouterr().err
    monkeypatch.setattr(attnsim.cli, "_dispatch", lambda *_: (_ for _ in ()).throw(RuntimeError("other")))
    with pytest.raises(RuntimeError, match="other"):
        main(["keys"])
