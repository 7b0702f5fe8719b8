import os
from pathlib import Path

import numpy as np
import pytest

FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "peer_small.npz"


@pytest.fixture
def fixture_path():
    path = Path(os.environ.get("ATTNSIM_PEER_FIXTURE", FIXTURE))
    if not path.exists():
        pytest.fail(f"parity fixture not found at {path} (set ATTNSIM_PEER_FIXTURE)")
    return path


@pytest.fixture
def small_cfg():
    """A small, fast configuration with every role present."""
    return {"n": 8, "T": 6, "d": 40, "signal_norm": 5.0, "steps": 50, "log_every": 5, "pop_points": 256}


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
