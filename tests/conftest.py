import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parent / "data"  # copies of the official-code runs (see its README)
# the figure code (scripts/gallery) is not installed with the package: a test run from a checkout
# with the package installed from it (CI's pip install .) finds it here
os.environ.setdefault("ATTNSIM_FIGURE_CODE", str(Path(__file__).resolve().parent.parent / "scripts"))
# the tests' own processes (python -m attnsim.cli, python -c) import the attnsim under test, the
# installed one, as the tests do, not the checkout in the working directory python -m and -c
# would put first: with pip install . they are two copies, each with its own Numba cache to fill
os.environ.setdefault("PYTHONSAFEPATH", "1")

if os.environ.get("ATTNSIM_TEST_TOY"):
    # tests/test_models.py runs its conformance suite on the toy model (tests/toymodel) in a
    # process of its own: registered here, before the config is assembled, through its one
    # registry line; any other value than "right" gives the toy one deliberate fault (the
    # mutation tests: tests/toymodel/spec.py FAULTS)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import toymodel.keys
    import toymodel.spec

    from attnsim import registry

    fault = os.environ["ATTNSIM_TEST_TOY"]
    if fault == "unread_key":
        toymodel.keys.KEYS = toymodel.keys.ToyKeysWithAnUnreadKey
    if fault == "colliding_metric":  # a registry line as written in MODELS (register() would refuse it)
        registry.MODELS["toy"] = toymodel.spec.entry(fault)
    else:
        registry.register("toy", toymodel.spec.entry(fault))
    if fault == "wrong_kernel":
        toymodel.spec._step_grad = toymodel.spec.wrong_step_grad


# the kernels compiled before the tests start, in two processes side by side: the attention
# model's default (gd) run in one (its kernels take the longest), in the other the attention
# model's own warm-up, every other model's runs and the attention model's other integrators
# (what ensure_compiled does for every model and integrator, split in two halves of about the
# same time: 32 s against 42 s with every attention kernel in one process, on this machine)
_COMPILE = """
import sys
import warnings
from attnsim import registry
from attnsim.run import ensure_compiled, simulate
warnings.simplefilter("ignore")  # the warm-up runs' settings are not a user's
first, *rest = registry.MODELS
spec = registry.spec(first)
if sys.argv[1] == "first":
    simulate(spec.warm_configs["gd"], _warmup=True)
else:
    spec.warm_up()
    for model in rest:
        for integrator in registry.spec(model).warm_configs:
            ensure_compiled(integrator, model=model)
    for integrator, config in spec.warm_configs.items():
        if integrator != "gd":
            simulate(config, _warmup=True)
"""


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """Compile (or load from Numba's cache) every model's kernels once, before pytest-xdist starts
    its workers. On a fresh clone each worker would otherwise compile whatever its first tests
    meet, often the same kernels at the same time, and a test reading a run's stderr would find
    the compiling notice in it."""
    if hasattr(session.config, "workerinput") or session.config.option.collectonly:
        return
    if os.environ.get("ATTNSIM_TEST_TOY"):
        return
    t = time.perf_counter()
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    procs = [subprocess.Popen([sys.executable, "-c", _COMPILE, part], **quiet) for part in ("first", "rest")]
    errs = [p.communicate()[1].decode(errors="replace").strip() for p in procs]
    failed = [err for p, err in zip(procs, errs, strict=True) if p.returncode]
    say = session.config.pluginmanager.get_plugin("terminalreporter")
    if say is not None:
        took = time.perf_counter() - t
        say.write_line(f"attnsim: every model's kernels compiled or loaded in {took:.1f} s")
        for err in failed:  # the tests that use them then fail with their own messages
            say.write_line(f"attnsim: compiling the kernels failed: {err.splitlines()[-1] if err else '?'}")


@pytest.fixture(autouse=True)
def _one_attnsim_on_the_path():
    """No test leaves a path to another copy of attnsim on ``sys.path`` (the checkout, with
    the package installed from it): the worker's later multiprocessing and Dask processes
    inherit ``sys.path``, import that copy and compile its kernels into a second cache."""
    before = set(sys.path)
    yield
    import attnsim

    home = Path(attnsim.__file__).resolve().parent
    for entry in set(sys.path) - before:
        other = Path(entry or ".").resolve() / "attnsim"
        if (other / "__init__.py").is_file() and other != home:
            pytest.fail(f"the test left {entry!r} on sys.path: another attnsim than {home}")


@pytest.fixture
def fixture_path():
    return DATA / "peer_small.npz"


@pytest.fixture
def encoder_fixture_path():
    return DATA / "peer_encoder_small.npz"


@pytest.fixture
def small_cfg():
    """A small, fast configuration with every role present."""
    return {"n": 8, "T": 6, "d": 40, "signal_norm": 5.0, "steps": 50, "log_every": 5, "pop_points": 256}


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def workers_in_this_process():
    """For a test whose sweep runs its remote workers as threads of the test process (dask's
    ``processes=False``): a remote worker pins its process to one thread for good
    (``pin_one_thread``), and the tests after this one must find the process as it was."""
    import numba

    from attnsim.runtime import threads

    pinned, numba_threads = threads._ONE_THREAD, numba.get_num_threads()
    env = os.environ.get("OPENBLAS_NUM_THREADS")
    blas_threads = {lib.prefix: lib.num_threads for lib in threads.blas().lib_controllers}
    yield
    threads._ONE_THREAD = pinned
    numba.set_num_threads(numba_threads)
    if env is None:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)
    else:
        os.environ["OPENBLAS_NUM_THREADS"] = env
    for lib in threads.blas().lib_controllers:
        if lib.prefix in blas_threads:
            lib.set_num_threads(blas_threads[lib.prefix])
