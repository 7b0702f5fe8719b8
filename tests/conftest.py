from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parent / "data"  # copies of the official-code runs (see its README)


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
