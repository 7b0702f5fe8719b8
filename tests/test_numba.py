"""Numba as attnsim uses it: the first compilation announced, the kernels as plain Python
(NUMBA_DISABLE_JIT) giving the same run, cached kernels loading without the compiler,
a cache filled in any order, a Numba too old refused by name, and sweeps that need no
Numba never importing it."""

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


_LEAN_LOAD = """
import numpy as np
from llvmlite import binding
from numba import njit
from attnsim.runtime import numba_cache
from attnsim.models.attention import kernels
objects = []
elf = numba_cache.elf_defined_symbols
numba_cache.elf_defined_symbols = lambda obj: objects.append(obj) or elf(obj)
x = np.arange(4.0)
kernels._sumsq(x)
lib = next(iter(kernels._sumsq.overloads.values())).library
bitcode = lib.__dict__.get("_attnsim_bitcode")
same = None
if bitcode is not None:
    mod = binding.parse_bitcode(bitcode)
    named = {g.name for gs in (mod.functions, mod.global_variables) for g in gs if not g.is_declaration}
    same = named == elf(objects[-1]) and len(named) > 0
linked = njit(lambda a: kernels._sumsq(a) + 1.0)(x)  # compiled now: links the loaded library
print(bitcode is not None, same, "_attnsim_bitcode" in lib.__dict__, linked)
"""


def test_cached_kernels_load_without_parsing_their_bitcode_and_still_link(tmp_path):
    """A cached attnsim kernel loads without its bitcode parsed: the symbols its object
    code defines (read from the ELF symbol table) are the ones the bitcode names, and a
    function compiled later that calls it links it (its bitcode parsed then)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    runs = [
        subprocess.run([sys.executable, "-c", _LEAN_LOAD], env=env, capture_output=True, text=True,
                       check=True).stdout.split()
        for _ in range(2)
    ]  # fmt: skip
    assert runs[0] == ["False", "None", "False", "15.0"]  # compiled in this process: nothing to skip
    assert runs[1] == ["True", "True", "False", "15.0"]  # loaded lean, the same symbols, then linked
    from attnsim.runtime.numba_cache import elf_defined_symbols

    # another format, or a truncated file: None, and the library loads through Numba's own path
    assert elf_defined_symbols(b"\xcf\xfa\xed\xfe" + bytes(60)) is None  # Mach-O
    assert elf_defined_symbols(b"\x7fELF\x02\x01" + bytes(10)) is None


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
