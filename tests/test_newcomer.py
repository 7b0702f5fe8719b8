"""What a newcomer meets: file modes, provenance, quick figures, --data
behaviour that matches the README, the compile message, and the kernels run
as plain Python (NUMBA_DISABLE_JIT)."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import attnsim
from attnsim.cli import main

SMALL = ["--set", "d=40", "--set", "n=6", "--set", "T=5", "--set", "steps=20", "--set", "pop_points=64"]


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_output_files_respect_the_umask(tmp_path, monkeypatch, capsys):
    from attnsim import results

    monkeypatch.setattr(results, "FILE_MODE", 0o666 & ~0o022)
    assert main(["run", *SMALL, "--out", str(tmp_path / "r"), "--plot", "scores", "--quiet"]) == 0
    for name in ("result.json", "trajectory.npz", "scores.png"):
        assert _mode(tmp_path / "r" / name) == 0o644, name
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        '[sweep]\nname = "m"\n[base]\nn = 6\nT = 5\nd = 40\nsteps = 10\npop_points = 64\n'
        "[grid]\nlr = [0.01]\n"
    )
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "sw"), "--workers", "1"]) == 0
    root = tmp_path / "sw" / "m"
    for p in [root / "records.csv", root / "sweep.json", *root.glob("records/*.json")]:
        assert _mode(p) == 0o644, p


def test_the_module_reads_the_real_umask():
    from attnsim import results

    mask = os.umask(0)
    os.umask(mask)
    assert results.FILE_MODE == 0o666 & ~mask


def test_results_record_where_the_code_came_from(tmp_path):
    r = attnsim.simulate({"n": 6, "T": 5, "d": 40, "steps": 5, "pop_points": 64})
    git = r.git
    assert git and (git.get("revision") or git.get("reason"))
    if git.get("revision"):
        assert len(git["revision"]) == 40 and git["source"]


def test_quick_figures_never_overwrite_the_committed_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "figures").mkdir()
    assert main(["figures", "dynamics", "--quick", "--cache", str(tmp_path / "c")]) == 0
    assert not list((tmp_path / "figures").iterdir())
    assert (tmp_path / "runs" / "figures-quick" / "fig2_dynamics.png").exists()


def _fixture(tmp_path, **changes):
    arrays = dict(np.load(Path(__file__).parent / "data" / "peer_small.npz"))
    for k, v in changes.items():
        if v is None:
            arrays.pop(k, None)
        else:
            arrays[k] = v
    path = tmp_path / "d.npz"
    np.savez(path, **arrays)
    return str(path)


def test_data_with_X_and_y_only_is_refused_naming_the_head(tmp_path, capsys):
    keep = {"X", "y"}
    f = dict(np.load(Path(__file__).parent / "data" / "peer_small.npz"))
    path = _fixture(tmp_path, **{k: None for k in f if k not in keep})
    assert main(["run", "--data", path, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "need array 'nu'" in err and "X and y alone" in err


def test_data_decides_what_it_holds_and_warns_about_overridden_keys(tmp_path, capsys):
    path = _fixture(tmp_path, mu_pos=None, mu_neg=None)  # no signals: no SNR, no population
    args = [
        "run",
        "--data",
        path,
        "--set",
        "n=99",
        "--set",
        "d=5",
        "--set",
        "test_n=7",
        "--set",
        "noise_rate=0.3",
    ]
    assert main([*args, "--set", "steps=5", "--out", str(tmp_path / "o")]) == 0
    out, err = capsys.readouterr()
    warning = [line for line in err.splitlines() if "overridden by the data file" in line]
    assert len(warning) == 1
    for key in ("n (99 -> 10", "d (5 -> 64", "test_n (ignored", "noise_rate (ignored"):
        assert key in warning[0]
    meta = json.loads((tmp_path / "o" / "result.json").read_text())
    assert meta["theory"]["snr"] is None and meta["final"]["pop_error"] is None
    assert "mu_pos, mu_neg and sigma" in meta["data"]["population"]
    assert "SNR" not in out and "|mu|" not in out and "noisy labels" in out


def test_data_without_roles_has_no_population_role_scores(tmp_path):
    r = attnsim.simulate({"steps": 5, "log_every": 1}, data=_fixture(tmp_path))
    assert np.isnan(r.final["pop_error"]) and "roles" in r.data["population"]
    assert np.isnan(r.final["score_clean_relevant"])
    assert r.theory["snr"] == pytest.approx(5 / 8)  # |mu| and sigma come from the file


def test_first_compilation_is_announced(monkeypatch):
    from attnsim import run

    calls = []
    ws = attnsim.Workspace()
    monkeypatch.setattr(run, "_warm_up", lambda integrator, model, ws: __import__("time").sleep(1.3) or 1.3)
    run.ensure_compiled("gd", announce=lambda: calls.append(1), workspace=ws)
    assert calls == [1]
    monkeypatch.setattr(run, "_warm_up", lambda integrator, model, ws: 0.0)
    run.ensure_compiled("gd", announce=lambda: calls.append(2), workspace=ws)
    assert calls == [1]  # fast: nothing said


_NOJIT = """
import json, sys, attnsim
r = attnsim.simulate({"n": 4, "T": 4, "d": 12, "steps": 6, "log_every": 2, "pop_points": 64, "test_n": 5,
                      "train": sys.argv[1], "integrator": sys.argv[2]})
print(json.dumps({k: r.trajectory[k].tolist() for k in ("train_loss", "pop_loss", "test_loss", "W_dev")}))
"""


@pytest.mark.parametrize("train,integrator", [("W,p", "gd"), ("W,p,nu", "gd"), ("p,nu", "flow")])
def test_kernels_as_plain_python_give_the_same_run(train, integrator):
    """NUMBA_DISABLE_JIT=1 runs every kernel as Python (for coverage tools):
    the same numbers as the compiled kernels, on a tiny case."""
    runs = []
    for jit in ("0", "1"):
        env = dict(os.environ, NUMBA_DISABLE_JIT=jit)
        out = subprocess.run([sys.executable, "-c", _NOJIT, train, integrator], env=env, capture_output=True,
                             text=True, check=True)  # fmt: skip
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    for key in runs[0]:
        np.testing.assert_allclose(runs[1][key], runs[0][key], rtol=1e-12, err_msg=key)


_CACHED_CALL = """
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from numba.core.base import BaseContext
from attnsim.runtime import numba_cache
from attnsim.models.attention import kernels
refreshes = []
refresh = BaseContext.refresh
BaseContext.refresh = lambda self: refreshes.append(1) or refresh(self)
ours = kernels._sumsq(np.ones(4))
n_ours = len(refreshes)
import tiny
print(numba_cache.INSTALLED, ours, tiny.twice(2.5), n_ours, len(refreshes) - n_ours)
"""


def test_cached_kernels_load_without_refreshing_the_compiler(tmp_path):
    """attnsim's cache loader: a hit of one of attnsim's kernels skips Numba's
    compiler refresh (most of a fresh process's kernel-loading time) and still
    runs the cached code; a miss compiles as usual, refreshing first; another
    library's cached function loads through Numba's own method, refresh included
    (the patch touches attnsim's kernels only)."""
    (tmp_path / "tiny.py").write_text(
        "from numba import njit\n\n\n@njit(cache=True)\ndef twice(x):\n    return 2.0 * x\n"
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    runs = [
        subprocess.run([sys.executable, "-c", _CACHED_CALL, str(tmp_path)], env=env, capture_output=True,
                       text=True, check=True).stdout.split()
        for _ in range(2)
    ]  # fmt: skip
    miss, hit = runs
    assert miss[:3] == hit[:3] == ["True", "4.0", "5.0"]
    assert int(miss[3]) > 0  # compiled: the compiler refreshed its context first
    assert int(hit[3]) == 0  # attnsim's kernel loaded from the cache without it
    assert int(miss[4]) > 0 and int(hit[4]) > 0  # the other library's: Numba's own loading, unchanged


_PARALLEL_FIRST = """
import numpy as np
from attnsim.models.attention import kernels as A
W, g, p = np.zeros((4, 3)), np.zeros(4), np.zeros(3)
A._w_pass_parallel(W, g, g, p, 0.1, np.zeros((A.N_CHUNKS, 3)))
"""
_WARMUP = "from attnsim.models.attention import steppers\nsteppers.warmup()\nprint('ok')\n"


@pytest.mark.slow
def test_gd_kernels_load_from_a_cache_filled_parallel_kernel_first(tmp_path):
    """The GD kernels call the parallel W pass. If the W pass came from the
    cache while they were compiled (two sweep workers filling a cold cache at
    once, or a process that used only the W pass first), their cache entries
    do not start Numba's threading layer, and every later process that loaded
    them crashed with a segmentation fault (Numba issues 8578, 9938): here in
    three fresh processes on a cold cache of their own."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))

    def run(code: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
        )

    first = run(_PARALLEL_FIRST)
    assert first.returncode == 0, first.stderr[-2000:]
    for _ in range(2):  # compiles the other kernels, then loads every one from the cache
        out = run(_WARMUP)
        assert (out.returncode, out.stdout.strip()) == (0, "ok"), out.stderr[-2000:]


def test_a_numba_too_old_for_the_kernels_is_refused_by_name():
    from attnsim._meta import MIN_NUMBA, check_numba_version

    assert MIN_NUMBA == (0, 63)
    for ok in ("0.63.0", "0.64.0rc1", "0.68.1", "1.0.0"):
        check_numba_version(ok)
    for old in ("0.62.1", "0.59.1"):
        with pytest.raises(ImportError, match=rf"numba >= 0\.63 \(found {old}\)"):
            check_numba_version(old)


def test_the_cli_names_a_too_old_numba_in_one_line(tmp_path):
    code = (
        "import sys, numba; numba.__version__ = '0.62.1'\n"
        "from attnsim.cli import main; sys.exit(main(['run', '--out', sys.argv[1]]))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True)
    assert out.returncode == 1 and not (tmp_path / "run").exists()
    assert out.stderr.strip() == (
        "attnsim: error: attnsim needs numba >= 0.63 (found 0.62.1): older versions crash running its "
        "kernels; pip install -U numba"
    )


def test_sweeps_and_figures_name_a_too_old_numba_before_starting_workers(tmp_path):
    """They check the version from package metadata (their main process does
    not import Numba); one line, exit 1, nothing written."""
    code = (
        "import sys, importlib.metadata as md\n"
        "real = md.version\n"
        "md.version = lambda name: '0.62.1' if name == 'numba' else real(name)\n"
        "from attnsim.cli import main\n"
        "sys.exit(main(['figures', 'heatmaps', '--quick', '--outdir', sys.argv[1], '--cache', sys.argv[2]]))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out"), str(tmp_path / "cache")],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 1 and out.stderr.strip().startswith(
        "attnsim: error: attnsim needs numba >= 0.63"
    )
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_a_sweep_with_nothing_left_to_compute_never_imports_numba(tmp_path):
    """The parent of a sweep only plans, reads and writes records (the workers load the kernels)."""
    sweep = tmp_path / "s.toml"
    sweep.write_text('[sweep]\nname = "light"\n[base]\nn = 4\nT = 4\nd = 20\nsteps = 5\npop_points = 16\n'
                     "[grid]\nsignal_norm = [2.0, 3.0]\n")  # fmt: skip
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "sw"), "--workers", "1"]) == 0
    code = (
        "import sys\n"
        "from attnsim.cli import main\n"
        "code = main(['sweep', sys.argv[1], '--out', sys.argv[2]])\n"
        "print(code, 'numba' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(sweep), str(tmp_path / "sw")], capture_output=True, text=True
    )
    assert out.stdout.split()[-2:] == ["0", "False"], out.stdout + out.stderr


def test_the_docs_list_every_field_of_result_json_final_and_the_trajectory():
    """The field lists of docs/results.md name every key a run writes (templated names such
    as ``score_<group>_<role>`` count for each of their instances)."""
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "results.md").read_text()
    names = set(re.findall(r"`([A-Za-z_<>]+)`", text))
    patterns = [re.compile("^" + re.sub(r"<[a-z]+>", "[a-z_]+", n) + "$") for n in names if "<" in n]
    suffixed = {n.strip("_") for n in names if n.startswith("_")}

    def listed(key: str) -> bool:
        if key in names or any(p.match(key) for p in patterns):
            return True
        base, _, end = key.rpartition("_")
        return end in suffixed and (base in names or any(p.match(base) for p in patterns))

    res = attnsim.simulate({"n": 4, "T": 4, "d": 20, "steps": 5, "pop_points": 64, "limit": True})
    sections = {
        "result.json": res.to_json(),
        "final": res.final,
        "trajectory": res.trajectory,
        "data": res.data,
    }
    for section, keys in sections.items():
        missing = [k for k in keys if not listed(k)]
        assert not missing, f"docs/results.md does not list {section} fields {missing}"
