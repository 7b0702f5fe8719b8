"""Numba as attnsim uses it: the kernels as plain Python (NUMBA_DISABLE_JIT) giving the
same run, a cache filled in any order, Numba's and NumPy's public interfaces only, a Numba
too old refused by name, and sweeps that need no Numba never importing it."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnsim.cli import main

SMALL = ["--set", "d=40", "--set", "n=6", "--set", "T=5", "--set", "steps=20", "--set", "pop_points=64"]


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


# the compile message's test is in test_messages.py (said on a cache miss, not after a second)


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


def test_attnsim_uses_its_dependencies_through_their_public_interfaces_only():
    """No private name of Numba's, NumPy's, SciPy's or llvmlite's (a leading underscore after
    their package) in the package, no undocumented attribute of Numba's compiled functions, no
    data file read from inside a dependency's folder, no patch of their attributes, and no upper
    bound on Numba in setup.cfg."""
    import re

    root = Path(__file__).resolve().parent.parent
    deps = r"(numba|numpy|scipy|llvmlite)"
    private = re.compile(rf"\b{deps}(\.\w+)*\._[a-z]\w*|from {deps}[\w.]* import _")
    inside = re.compile(rf"\b{deps}(\.\w+)*\.__file__|\b{deps}\.__path__")  # a file read by path
    named = (
        "_load_overload", "_set_madvise_hugepage", "_launch_threads", "_unserialize", "_defined_symbols",
        "_sobol_direction_numbers", ".entry_point", ".overloads[", ".overloads.",
    )  # fmt: skip
    for path in sorted((root / "attnsim").rglob("*.py")):
        text = path.read_text()
        assert not private.search(text), f"{path}: {private.search(text).group(0)}"
        assert not inside.search(text), f"{path}: {inside.search(text).group(0)}"
        assert not [name for name in named if name in text], (path, [name for name in named if name in text])
    requires = (root / "setup.cfg").read_text()
    assert re.search(r"numba>=[\d.]+\s*$", requires, re.M) and "numba<" not in requires.replace(" ", "")


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
