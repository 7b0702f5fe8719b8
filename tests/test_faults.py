"""Faults a run meets on real machines and the inputs only an adversary tries:
full disks, read-only folders, damaged or foreign records, locks held by
stopped processes, SIGTERM, inputs that would exhaust memory (run in a child
with a memory limit), and the Python API's types (SPEC §8)."""

import contextlib
import errno
import fcntl
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import attnsim
from attnsim.cli import main
from attnsim.config import ConfigError, from_mapping
from attnsim.sweep.point import run_point
from attnsim.sweep.run import run_sweep
from attnsim.sweep.spec import Task, parse_sweep, record_key
from attnsim.sweep.store import Store

TINY = {"n": 6, "T": 4, "d": 20, "steps": 5, "pop_points": 64}
BASE = {"n": 6, "T": 5, "steps": 60, "log_every": 30, "pop_points": 256, "pop_log_points": 2}


def _cli(args, cwd, env=None, limit_bytes=None, timeout=300, **kw):
    """attnsim in a child process (optionally with an address-space limit)."""

    def limits():
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return subprocess.run(
        [sys.executable, "-m", "attnsim.cli", *args], cwd=cwd, capture_output=True, text=True,
        env=dict(os.environ, **(env or {})), preexec_fn=limits, timeout=timeout, **kw,
    )  # fmt: skip


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# -- inputs that would exhaust memory: refused up front, checked under a memory limit ------------

OOM_CASES = {
    "real seeds 1e9": ["real", "FEATURES", "--seeds", "1000000000"],
    "real digits d=1e9": ["real", "digits", "--set", "d=1e9"],
    "real digits d=2e7": ["real", "digits", "--set", "d=20000000"],
    "sweep seeds 1e9": ["sweep", "SWEEP"],
}


@pytest.mark.parametrize("case", list(OOM_CASES))
def test_inputs_that_would_exhaust_memory_are_refused_in_one_line(case, tmp_path):
    """Under a 3 GB address-space limit: a regression would fail with MemoryError
    in the child, never take the machine's memory."""
    rng = np.random.default_rng(0)
    feats = tmp_path / "f.npz"
    np.savez(feats, features=rng.normal(size=(900, 3, 6)), labels=np.where(rng.random(900) < 0.5, 1.0, -1.0))
    sweep = tmp_path / "s.toml"
    sweep.write_text("[sweep]\nseeds = 1000000000\n[base]\nn = 4\nT = 4\nd = 20\n")
    args = [str(feats) if a == "FEATURES" else str(sweep) if a == "SWEEP" else a for a in OOM_CASES[case]]
    if "digits" in args:
        pytest.importorskip("sklearn")
    work = tmp_path / "work"
    work.mkdir()
    t0 = time.time()
    done = _cli(args, work, limit_bytes=3 * 2**30, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "MemoryError" not in done.stderr and time.time() - t0 < 60
    assert _files(work) == []


# -- writes that fail: a full disk, a read-only folder ---------------------------------------------


@contextlib.contextmanager
def _small_disk(path: Path, size="64k"):
    """A tiny tmpfs at ``path`` (root only; skipped where mounting is not allowed)."""
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(path: Path):
    """Fill a file system to the last byte."""
    with open(path / "filler", "wb", buffering=0) as fh:
        with contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 4096)
        with contextlib.suppress(OSError):
            while True:
                fh.write(b"\0")


def test_run_on_a_full_disk_fails_in_one_line_and_leaves_nothing(tmp_path):
    with _small_disk(tmp_path / "disk") as disk:
        (disk / "runs").mkdir()
        _fill(disk)
        args = [
            "run",
            *sum((["--set", f"{k}={v}"] for k, v in TINY.items()), []),
            "--out",
            str(disk / "runs/r"),
        ]
        done = _cli(args, tmp_path)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert len(lines) == 1 and "No space left on device" in lines[0] and "disk/runs/r" in lines[0]
        assert _files(disk) == ["filler", "runs"]


@pytest.mark.parametrize("workers", [1, 2])
def test_sweep_on_a_full_disk_fails_in_one_line_naming_the_file(workers, tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('[sweep]\nname = "s"\n[base]\nn = 4\nT = 4\nd = 20\nsteps = 5\npop_points = 64\n'
                     "[grid]\nsignal_norm = [1, 2, 3, 4, 5, 6, 7, 8]\n")  # fmt: skip
    with _small_disk(tmp_path / "disk", size="128k") as disk:
        args = ["sweep", str(sweep), "--out", str(disk), "--workers", str(workers)]
        (disk / "s" / "records").mkdir(parents=True)
        _fill(disk)
        done = _cli(args, tmp_path)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert "No space left on device" in lines[-1] and "SIGKILL" not in done.stderr, done.stderr
        assert len([x for x in lines if x.startswith("attnsim:")]) == 1, done.stderr
        assert not [p for p in (disk / "s").rglob("*") if p.name.endswith((".tmp", ".lock"))]


def test_a_records_folder_made_read_only_stops_the_sweep_in_one_line(tmp_path, monkeypatch, capsys):
    """EROFS from the file system (simulated: root writes through mode bits)."""
    sweep = tmp_path / "s.toml"
    sweep.write_text('[sweep]\nname = "s"\n[base]\nn = 4\nT = 4\nd = 20\nsteps = 5\npop_points = 64\n'
                     "[grid]\nsignal_norm = [1, 2, 3]\n")  # fmt: skip
    import attnsim.results

    real = os.open

    def read_only(path, flags, *a, **kw):
        if flags & os.O_CREAT and Path(path).parent.name == "records":
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real(path, flags, *a, **kw)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(attnsim.results.os, "open", read_only)
    assert main(["sweep", str(sweep), "--workers", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Read-only file system" in err[0] and "records/" in err[0], err


def test_a_failed_save_leaves_no_partial_run(tmp_path, monkeypatch):
    import attnsim.results

    res = attnsim.simulate(TINY)
    real = attnsim.results.atomic_write

    def fail_second(path, write, durable=True):
        if path.name == "result.json":
            raise attnsim.results.WriteError(f"{path}: cannot write (No space left on device)")
        real(path, write, durable)

    monkeypatch.setattr(attnsim.results, "atomic_write", fail_second)
    with pytest.raises(attnsim.results.WriteError, match="result.json"):
        res.save(tmp_path / "r")
    assert not (tmp_path / "r").exists()


# -- records verified when read ----------------------------------------------------------------------


def _spec(**kw):
    return parse_sweep({"sweep": {"name": "v", "seeds": 1}, "base": BASE,
                        "grid": {"d": [60, 90], "signal_norm": [2.0, 4.0, 6.0]}, **kw})  # fmt: skip


def test_records_are_verified_when_read(tmp_path):
    spec = _spec()
    first = run_sweep(spec, tmp_path, workers=1, progress=False)
    p = [first.store.path(k) for k in first.keys]
    recs = [json.loads(x.read_text()) for x in p]
    p[1].write_text(p[0].read_text())  # copied over another point's file
    no_final = dict(recs[2])
    del no_final["final"]
    p[2].write_text(json.dumps(no_final))
    p[3].write_text(json.dumps({**recs[3], "schema_version": 999}))
    p[4].write_text(json.dumps({**recs[4], "final": {**recs[4]["final"], "train_loss": "abc"}}))
    edited = {**recs[5], "config": {**recs[5]["config"], "lr": 0.5}}
    edited.pop("key")
    p[5].write_text(json.dumps(edited))  # its config edited: it no longer hashes to its name
    again = run_sweep(spec, tmp_path, workers=1, progress=False)
    assert again.computed == 5 and again.ok == 6
    msg = next(m for m in again.messages if "damaged" in m)
    for needle in ("another point", "no final section", "schema version 999", "final.train_loss is 'abc'",
                   "does not hash"):  # fmt: skip
        assert needle in msg, msg
    rows = (again.root / "records.csv").read_text().splitlines()
    assert len(rows) == 7 and len(set(rows[1:])) == 6
    assert [json.loads(x.read_text())["final"] for x in p] == [r["final"] for r in recs]


def test_records_written_before_keys_were_stored_still_count(tmp_path):
    """Records without "key" (earlier versions) are verified by their config's hash alone."""
    spec = _spec()
    first = run_sweep(spec, tmp_path, workers=1, progress=False)
    for path in first.store.dir.glob("*.json"):
        rec = json.loads(path.read_text())
        rec.pop("key")
        path.write_text(json.dumps(rec))
    assert run_sweep(spec, tmp_path, workers=1, progress=False).computed == 0


def test_store_keeps_only_records_of_their_point(tmp_path):
    store = Store(tmp_path)
    cfg = from_mapping(TINY)
    key = record_key(cfg)
    (store.dir / ".abc.json.123.tmp").write_text("{half")
    assert store.compute(Task(key, cfg.to_dict(resolved=False), []), run_point)
    assert store.done() == {key} and store.records()[0]["key"] == key
    assert store.records()[0]["threads"]["numba_threads"] >= 1  # records say what they are bit-identical for
    os.replace(store.path(key), store.path("0" * 16))
    assert store.done() == set() and "another point" in store.damaged[0]


# -- waiting, stopping, reporting ---------------------------------------------------------------------


def _sweep_file(tmp_path, grid="signal_norm = [1, 2, 3, 4, 5, 6, 7, 8]", steps=3000, base=""):
    path = tmp_path / "s.toml"
    path.write_text(f'[sweep]\nname = "s"\n[base]\nn = 4\nT = 4\nd = 20\nsteps = {steps}\npop_points = 64\n'
                    f"{base}[grid]\n{grid}\n")  # fmt: skip
    return path


def test_a_sweep_waiting_for_another_process_lock_says_so(tmp_path):
    path = _sweep_file(tmp_path, grid="signal_norm = [1]", steps=5)
    spec = parse_sweep(attnsim.config.read_toml(path), name="s")
    key = record_key(spec.points()[0])
    recdir = tmp_path / "sweeps" / "s" / "records"
    recdir.mkdir(parents=True)
    fd = os.open(recdir / f"{key}.lock", os.O_CREAT | os.O_RDWR)
    os.write(fd, b"4242")
    fcntl.flock(fd, fcntl.LOCK_EX)  # a stopped worker of another sweep holds it
    proc = subprocess.Popen([sys.executable, "-m", "attnsim.cli", "sweep", str(path), "--workers", "1"],
                            cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        line = proc.stderr.readline()
        assert "waiting for" in line and key in line and "pid 4242" in line, line
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "1 of 1 records" in out, err


def test_a_stopped_workers_lock_file_is_removed_unless_someone_holds_it(tmp_path):
    """A worker killed mid-point (or stopped between creating its lock file and holding it)
    leaves the file; the sweep removes it, but never a lock a live process holds."""
    store = Store(tmp_path / "s")
    left = store.dir / "a.lock"
    left.write_text("4242")  # its holder is gone
    half = store.dir / ".a.json.04bd330333706475.tmp"  # killed while writing its record
    half.write_text('{"config"')
    other = store.dir / ".b.json.04bd330333706475.tmp"  # another point's: not this one's to remove
    other.write_text("{")
    store.drop_stale_lock("a")
    assert not left.exists() and not half.exists() and other.exists()
    other.unlink()
    store.drop_stale_lock("never-locked")  # nothing there: nothing to do
    with store.lock("b"):  # held (by another open file, as another process would)
        store.drop_stale_lock("b")
        assert (store.dir / "b.lock").exists()
    assert not (store.dir / "b.lock").exists()


def test_taking_a_points_lock_removes_the_temporary_a_killed_writer_left(tmp_path):
    """SIGKILL leaves atomic_write's temporary file behind (no handler runs); the next worker to
    take that point's lock removes it, and no other point's."""
    store = Store(tmp_path / "s")
    (store.dir / "a.lock").write_text("4242")  # the killed writer's lock file stays with it
    half = store.dir / ".a.json.04bd330333706475.tmp"
    half.write_text('{"config"')
    other = store.dir / ".b.json.04bd330333706475.tmp"
    other.write_text("{")
    with store.lock("a"):
        assert not half.exists() and other.exists()
        store.write("a", {"status": "ok"})
    assert json.loads(store.path("a").read_text()) == {"status": "ok"} and other.exists()


def test_sigterm_stops_a_sweep_like_ctrl_c(tmp_path):
    # about a second per point (10^5 steps took 0.12 s: the sweep could end before the signal)
    path = _sweep_file(tmp_path, steps=1_000_000, base="log_every = 100000\n")
    recdir = tmp_path / "sweeps" / "s" / "records"
    proc = subprocess.Popen([sys.executable, "-m", "attnsim.cli", "sweep", str(path), "--workers", "2"],
                            cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    deadline = time.time() + 120
    while time.time() < deadline and not (recdir.exists() and any(recdir.glob("*.lock"))):
        time.sleep(0.02)  # until a worker is inside a point
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err.strip().splitlines() == ["attnsim: terminated"], err
    time.sleep(0.5)
    assert not [p for p in recdir.iterdir() if not p.name.endswith(".json")]  # no temporary files, no locks
    again = subprocess.run([sys.executable, "-m", "attnsim.cli", "sweep", str(path)], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert again.returncode == 0 and "8 of 8 records" in again.stdout, again.stderr


def test_a_sweep_summary_names_why_points_failed_and_collects_warnings(tmp_path):
    base = 'loss = "linear"\ntrain = "p,nu"\n'
    path = _sweep_file(tmp_path, grid="lr = [5e-3, 1e305, 1e306, 40.0]", steps=30, base=base)
    done = subprocess.run([sys.executable, "-m", "attnsim.cli", "sweep", str(path), "--workers", "2"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
    err = done.stderr
    assert done.returncode == 1 and "warnings.warn" not in err and "Warning:" not in err, err
    failed = [line for line in err.splitlines() if "point(s) failed" in line]
    assert len(failed) == 2 and all("diverged at step" in line for line in failed), err
    assert "2 failed" in done.stdout


# -- the Python API's types ------------------------------------------------------------------------

ACCEPTED = {
    "np.int64 d": ({"d": np.int64(100)}, "d", 100),
    "np.int32 n": ({"n": np.int32(6)}, "n", 6),
    "np.uint8 T": ({"T": np.uint8(5)}, "T", 5),
    "np.float32 lr": ({"lr": np.float32(0.25)}, "lr", 0.25),
    "np.float64 sigma": ({"sigma": np.float64(2.0)}, "sigma", 2.0),
    "np.int64 as a float": ({"signal_norm": np.int64(7)}, "signal_norm", 7.0),
    "np.bool_ limit": ({"limit": np.bool_(True)}, "limit", True),
    "np.bool_ shuffle": ({"shuffle_roles": np.bool_(False)}, "shuffle_roles", False),
    "float for an int": ({"steps": 10.0}, "steps", 10),
    "np.float64 for an int": ({"steps": np.float64(12.0)}, "steps", 12),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_api_accepts_numpy_scalars(case):
    values, key, want = ACCEPTED[case]
    got = getattr(from_mapping(values), key)
    assert got == want and type(got) is type(want)


REFUSED = {
    "text for an int": ({"n": "20"}, ConfigError, "n: expected an integer, got the text '20'"),
    "text for a bool": ({"limit": "true"}, ConfigError, "limit: expected true or false"),
    "text for a float": ({"lr": "5e-3"}, ConfigError, "lr: expected a number, got the text"),
    "int key": ({1: 2}, ConfigError, "config keys are strings"),
    "None key": ({None: 2}, ConfigError, "config keys are strings"),
    "np.bool_ for an int": ({"n": np.bool_(True)}, ConfigError, "n: expected an integer"),
    "bool for a float": ({"lr": True}, ConfigError, "lr: expected a number"),
    "int for a bool": ({"limit": 1}, ConfigError, "limit: expected true or false"),
    "fraction of an int": ({"d": np.float64(100.5)}, ConfigError, "d: expected an integer"),
    "complex": ({"lr": 1j}, ConfigError, "lr: expected a number"),
    "list": ({"lr": [0.1]}, ConfigError, "lr: expected a number"),
    "nan": ({"lr": np.float32("nan")}, ConfigError, "lr: must be finite"),
    "subnormal": ({"lr": 5e-324}, ConfigError, "lr: 5e-324 is subnormal"),
    "number for a name": ({"engine": 3}, ConfigError, "engine: expected a string"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_api_refuses_wrong_types_with_a_message(case):
    values, error, needle = REFUSED[case]
    with pytest.raises(error, match=None) as info:
        from_mapping(values)
    assert needle in str(info.value), info.value


@pytest.mark.parametrize("data", [5, {"X": 1}, 2.5, [1, 2]])
def test_simulate_names_a_data_argument_of_the_wrong_type(data):
    with pytest.raises(TypeError, match="data: expected a path to an .npz file"):
        attnsim.simulate(TINY, data=data)


def test_a_single_class_training_set_runs_with_one_warning(tmp_path, capsys):
    arrays = dict(np.load(Path(__file__).parent / "data" / "peer_small.npz"))
    arrays["y"] = np.ones_like(arrays["y"])
    np.savez(tmp_path / "x.npz", **arrays)
    assert main(["run", "--data", str(tmp_path / "x.npz"), "--set", "steps=3", "--out", str(tmp_path / "r"),
                 "--quiet"]) == 0  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "every training label is +1" in err[0], err


# -- check-grad's verdict ------------------------------------------------------------------------------


def test_check_grad_fails_when_a_block_exceeds_the_tolerance(capsys):
    assert main(["check-grad", "--tol", "1e-14"]) == 1  # below the differences' own error
    out, err = capsys.readouterr()
    assert out.strip().splitlines()[-1].startswith("FAILED at --tol 1e-14")
    assert "check-grad failed: block" in err
    assert main(["check-grad"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("passed") and float(last.split()[-1]) < 1e-7


# -- looking at results ----------------------------------------------------------------------------


def _captured_labels(monkeypatch):
    """The axis labels of every figure saved from now on."""
    import matplotlib.figure

    seen = []
    real = matplotlib.figure.Figure.savefig

    def savefig(fig, *a, **kw):
        seen.append([(ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) for ax in fig.axes])
        return real(fig, *a, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return seen


def test_plot_draws_a_finished_run(tmp_path, monkeypatch, capsys):
    run = tmp_path / "r"
    assert main(["run", "--set", "d=60", "--set", "steps=50", "--out", str(run), "--quiet"]) == 0
    seen = _captured_labels(monkeypatch)
    assert main(["plot", str(run)]) == 0
    png = run / "plot.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 20_000
    labels = seen[0]
    assert [y for _, y, _ in labels] == [
        "score per role (summed over tokens)",
        "loss",
        "error (log; bars: 2 se)",
    ]
    assert all(x == "step" for x, _, _ in labels)
    assert f"wrote {png}" in capsys.readouterr().out


def test_plot_draws_a_sweep_and_load_sweep_returns_its_table(tmp_path, monkeypatch, capsys):
    sweep = tmp_path / "s.toml"
    base = "[base]\nn = 6\nT = 5\nd = 60\nsteps = 40\npop_points = 64\n"
    grid = "[grid]\nsignal_norm = [2.0, 4.0, 8.0]\nnoise_rate = [0.1, 0.3]\n"
    sweep.write_text(f'[sweep]\nname = "s"\nseeds = 2\n{base}{grid}')
    out = tmp_path / "sw"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1"]) == 0
    seen = _captured_labels(monkeypatch)
    assert main(["plot", str(out / "s"), "--metric", "train_loss", "--logy"]) == 0
    assert (out / "s" / "train_loss-vs-signal_norm-logy.png").stat().st_size > 10_000
    (x, y, title), = seen[0]  # fmt: skip
    assert x == "signal_norm" and y.startswith("train_loss") and "2 seed(s)" in title
    assert main(["plot", str(out / "s"), "--metric", "train_los"]) == 2
    assert "did you mean 'train_loss'" in capsys.readouterr().err
    table = attnsim.load_sweep(out / "s")
    import pandas as pd

    assert isinstance(table, pd.DataFrame) and len(table) == 12
    assert sorted(set(table["config.signal_norm"])) == [2.0, 4.0, 8.0] and (table["status"] == "ok").all()
    monkeypatch.setitem(sys.modules, "pandas", None)  # as without the optional pandas
    plain = attnsim.load_sweep(out / "s")
    assert isinstance(plain, dict) and plain["train_loss"].dtype == float and plain["regime"].dtype == object
    assert np.array_equal(plain["train_loss"], table["train_loss"].to_numpy())


def test_keys_lists_every_key_and_the_help_says_where(capsys):
    from attnsim.config import KEYS, Config

    assert main(["keys"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [r for r in lines[1:] if not r.startswith(" ")]  # a key's line; its meaning indented below
    assert [r.split()[0] for r in rows] == list(KEYS)
    assert max(map(len, lines)) <= 100
    assert any(r.split()[:2] == ["lr", str(Config().lr)] for r in rows)
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "attnsim keys" in capsys.readouterr().out.replace("\n", " ")
    with pytest.raises(SystemExit):
        main(["figures", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    from attnsim.cli_args import load_gallery

    NAMES = load_gallery().NAMES

    assert all(name in text for name in NAMES)


def test_results_record_the_thread_settings_and_the_data_file(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    res = attnsim.simulate(TINY)
    assert res.threads["env"]["OPENBLAS_NUM_THREADS"] == "1" and res.threads["numba_threads"] >= 1
    assert res.threads["attnsim_split"] in (1, 2)
    data = Path(__file__).parent / "data" / "peer_small.npz"
    res = attnsim.simulate({"steps": 3}, data=str(data))
    import hashlib

    assert res.data["file_sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert res.data["file_bytes"] == data.stat().st_size
    res.save(tmp_path / "r")
    saved = json.loads((tmp_path / "r" / "result.json").read_text())
    assert saved["threads"] == json.loads(json.dumps(res.threads)) and saved["data"]["file_sha256"]


@pytest.mark.parametrize("env", [{"NUMBA_NUM_THREADS": "0"}, {"NUMBA_THREADING_LAYER": "tbb"},
                                 {"MPLBACKEND": "nonsense"}])  # fmt: skip
def test_the_environment_is_checked_before_numba_or_matplotlib_load(env, tmp_path):
    """In a fresh process (Numba reads its variables once, at import)."""
    if "NUMBA_THREADING_LAYER" in env:
        from attnsim.runtime.environment import _have_tbb

        if _have_tbb():
            pytest.skip("TBB is installed here")
    done = _cli(["run", *sum((["--set", f"{k}={v}"] for k, v in TINY.items()), []), "--plot", "scores",
                 "--out", "r"], tmp_path, env=env, timeout=120)  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and next(iter(env)) in lines[0], done.stderr
    assert _files(tmp_path) == []


# a process that SIGTERM stops with exit code 143 (attnsim.runtime.signals.on_signal)
_STOPPED_BY_SIGTERM = """
import signal, time
from attnsim.runtime.signals import on_signal
def stop():
    raise SystemExit(143)
on_signal(signal.SIGTERM, stop)
"""

_IN_IMPORTLIB = (
    _STOPPED_BY_SIGTERM
    + """
ns = {}
code = "import signal\\ndef inside():\\n    signal.raise_signal(signal.SIGTERM)\\n    return 'returned'\\n"
exec(compile(code, "<frozen importlib._bootstrap>", "exec"), ns)
print(ns["inside"](), flush=True)
time.sleep(20)
print("carried on", flush=True)
"""
)


def test_a_signal_inside_the_import_machinery_waits_until_it_returns(tmp_path):
    """A module lock's weakref callback takes the global import lock before its
    ``try``: a raise there was dropped with the lock held, and the process hung
    once a thread imported anything (seen once in 16 SIGTERMs while the kernels
    loaded). Inside the import machinery's own frames the signal waits; a module's
    body, which the import machinery runs, takes it at once."""
    done = subprocess.run([sys.executable, "-c", _IN_IMPORTLIB], capture_output=True, text=True, timeout=60)
    assert done.returncode == 143 and done.stdout == "returned\n", (done.stdout, done.stderr)
    from attnsim.runtime.signals import _deferred

    (tmp_path / "attnsim_probe_body.py").write_text(
        "import sys\nfrom attnsim.runtime.signals import _deferred\nDEFERRED = _deferred(sys._getframe())\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import attnsim_probe_body
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("attnsim_probe_body", None)
    assert attnsim_probe_body.DEFERRED is False
    assert _deferred(sys._getframe()) is False


_IN_DEL = (
    _STOPPED_BY_SIGTERM
    + """
class Finalized:
    def __del__(self):
        signal.raise_signal(signal.SIGTERM)
obj = Finalized()
del obj
print("dropped", flush=True)
time.sleep(20)
print("carried on", flush=True)
"""
)


def test_a_signal_whose_exception_python_drops_is_sent_again():
    """In a ``__del__`` (or a weakref callback) Python prints the handler's
    exception and carries on; the signal is sent again and stops the process."""
    done = subprocess.run([sys.executable, "-c", _IN_DEL], capture_output=True, text=True, timeout=60)
    assert done.returncode == 143 and done.stdout == "dropped\n", (done.stdout, done.stderr)
    assert done.stderr == "", done.stderr


_WARM_UP = (
    _STOPPED_BY_SIGTERM
    + """
print("ready", flush=True)
try:
    from attnsim.run import ensure_compiled
    ensure_compiled()
except RuntimeError as exc:  # raised inside a class body's __set_name__ (an import), Python wraps it
    if isinstance(exc.__cause__, SystemExit):
        raise exc.__cause__ from None
    raise
print("warm", flush=True)
"""
)


@pytest.mark.slow
def test_a_signal_while_the_kernels_load_never_aborts_the_process():
    """Kernels loaded from the cache look up SciPy's BLAS at their first call;
    a signal handled during that lookup used to abort the process ("Fatal
    Python error: BLAS wrapper returned with an error", 9 of 40 tries). The
    cache is filled first (on a fresh clone the kernels may not be compiled yet:
    compiling them on a busy machine can take longer than a try may)."""
    warm = subprocess.run([sys.executable, "-c", _WARM_UP], capture_output=True, text=True, timeout=900)
    assert "warm" in warm.stdout, warm.stderr
    outcomes = []
    for i in range(16):
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        proc = subprocess.Popen([sys.executable, "-c", _WARM_UP], **pipes)
        proc.stdout.readline()
        time.sleep(0.05 + 0.06 * i)
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # stopped here, its pipes closed: no later test inherits it
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"try {i}: the process did not end within 60 s of SIGTERM: {err}") from None
        assert "Fatal Python error" not in err, err
        outcomes.append(proc.returncode if proc.returncode == 143 else "warm" if "warm" in out else err)
    assert set(outcomes) <= {143, "warm"} and 143 in outcomes, outcomes


def test_a_sweep_runs_no_more_workers_than_fit_in_memory_together(tmp_path, monkeypatch):
    """Each point fits alone (checked when the sweep is read); two at once would not."""
    import attnsim.sweep.run
    from attnsim.models.attention.plan import choose_engine, memory_estimate

    spec = parse_sweep({"sweep": {"name": "m", "seeds": 4}, "base": {**BASE, "d": 60}})
    cfg = spec.points()[0]
    need = sum(b for *_, b in memory_estimate(cfg, choose_engine(cfg, user_data=False)[0]))
    monkeypatch.setattr(attnsim.sweep.run, "physical_memory", lambda: 1.5 * need / 0.8)
    rep = run_sweep(spec, tmp_path, workers=2, progress=False)
    assert rep.ok == 4 and rep.workers == 0  # one worker: it ran here
    assert any("running 1 worker(s), not 2" in m for m in rep.messages), rep.messages


_FORKED = """
import multiprocessing, os, sys, time
import attnsim

small = {"n": 4, "T": 4, "d": 12, "steps": 5, "pop_points": 64}
dense = {"d": 600, "engine": "dense", "steps": 3}  # k r above PAR_MIN: the parallel W pass


def loss(seed):
    return attnsim.simulate({**(dense if seed % 2 else small), "seed": seed}).final["train_loss"]


if __name__ == "__main__":
    here = [loss(s) for s in range(4)]  # the parent uses the thread pools and the threading layer first
    pid = os.fork()
    if pid == 0:
        ok = [loss(s) for s in range(4)] == here
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.map(loss, range(4)) == here
    print("forks ok")
"""


def test_simulate_in_forked_children_neither_hangs_nor_changes_a_number(tmp_path):
    """After runs in the parent (thread pools started, Numba's GNU OpenMP layer used),
    os.fork() and multiprocessing's fork pool run attnsim to the same numbers."""
    script = tmp_path / "forked.py"
    script.write_text(_FORKED)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0 and "forks ok" in out.stdout, out.stdout + out.stderr


def _tiny_args():
    return [x for k, v in TINY.items() for x in ("--set", f"{k}={v}")]


def test_a_finished_run_is_never_overwritten_without_force(tmp_path, capsys):
    """A rerun into a run's folder is refused in one line; --force replaces the run
    and its stale figures; a sweep's folder never takes a run."""
    out = tmp_path / "r"
    assert main(["run", *_tiny_args(), "--out", str(out), "--plot", "scores"]) == 0
    first = (out / "result.json").read_text()
    capsys.readouterr()
    assert main(["run", *_tiny_args(), "--set", "seed=3", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds result.json, scores.png" in err[0] and "--force" in err[0]
    assert (out / "result.json").read_text() == first
    assert main(["run", *_tiny_args(), "--set", "seed=3", "--out", str(out), "--force"]) == 0
    assert json.loads((out / "result.json").read_text())["config"]["seed"] == 3
    assert not (out / "scores.png").exists()  # the old run's figure went with it
    (out / "notes.txt").write_text("mine")
    assert main(["run", *_tiny_args(), "--out", str(out), "--force"]) == 2  # not a run's file: kept, refused
    assert "notes.txt" in capsys.readouterr().err and (out / "notes.txt").exists()
    sweep = tmp_path / "sw"
    sweep.mkdir()
    (sweep / "sweep.json").write_text("{}")
    assert main(["run", *_tiny_args(), "--out", str(sweep), "--force"]) == 2
    assert "is a sweep's folder" in capsys.readouterr().err


def test_two_runs_into_one_folder_at_once_lose_neither(tmp_path):
    """The second run to finish finds the folder filled (under its lock) and keeps
    its own result beside it, saying where."""
    out = tmp_path / "r"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "attnsim.cli",
                "run",
                *_tiny_args(),
                "--set",
                f"seed={s}",
                "--out",
                str(out),
            ],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        for s in (0, 1)
    ]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    saved = sorted(
        json.loads((d / "result.json").read_text())["config"]["seed"]
        for d in (out, Path(f"{out}-2"))
        if (d / "result.json").exists()
    )
    finished = sorted(s for s, p in zip((0, 1), procs) if p.returncode == 0)
    assert saved == finished and finished, errs  # every finished run kept
    for p, e in zip(procs, errs):  # one refused before it began, or kept beside: never lost
        assert p.returncode == 0 or (p.returncode == 2 and "already holds" in e), e
    assert len(finished) == 1 or any(f"this run is in {out}-2" in e for e in errs)


def test_an_exit_right_after_the_temporary_file_is_created_leaves_nothing(tmp_path, monkeypatch):
    """A sweep worker stopped on Ctrl-C unwinds by SystemExit wherever it is: also between
    the temporary file's creation and the moment its name is known (mkstemp's window)."""
    real_open = os.open

    def open_then_exit(path, flags, *args):
        fd = real_open(path, flags, *args)
        if flags & os.O_CREAT:
            os.close(fd)
            raise SystemExit(143)
        return fd

    monkeypatch.setattr(os, "open", open_then_exit)
    with pytest.raises(SystemExit):
        attnsim.results.atomic_write(tmp_path / "r.json", lambda fh: fh.write(b"{}"))
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
