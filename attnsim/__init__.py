"""attnsim: fast, exact simulation of token selection by a softmax attention
classifier trained on noisy labels (Sakamoto & Sato, ICML 2025).

>>> import attnsim
>>> res = attnsim.simulate({"d": 2000, "signal_norm": 20})
>>> res.final["regime"]
"""

import time as _time

_t0 = _time.perf_counter()

__version__ = "0.1.0"

from .config import Config, ConfigError, make_config  # noqa: E402
from .results import Result, load  # noqa: E402
from .run import simulate  # noqa: E402

IMPORT_S = _time.perf_counter() - _t0

__all__ = ["Config", "ConfigError", "Result", "load", "make_config", "simulate", "__version__"]
