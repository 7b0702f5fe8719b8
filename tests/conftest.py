import os
import sys
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parent / "data"  # copies of the official-code runs (see its README)
# the figure code (scripts/gallery) is not installed with the package: a test run from a checkout
# with the package installed from it (CI's pip install .) finds it here
os.environ.setdefault("ATTNSIM_FIGURE_CODE", str(Path(__file__).resolve().parent.parent / "scripts"))

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
