"""The encoder's parameters (SPEC §12): their names and shapes as PyTorch stores them, and
PyTorch's default initialization from the init stream (the keys it does not read are refused
by its registry line: attnsim.registry)."""

from __future__ import annotations

import math

import numpy as np

from ...config import Config
from ...data.dataset import DataError
from ...init import uniform_fill
from ...registry import ENCODER_ARRAYS as PARAMS


def param_shapes(d: int, m: int) -> dict[str, tuple]:
    """Every encoder parameter's shape, as PyTorch stores it (d width, m MLP width)."""
    return {
        "cls": (1, 1, d),
        "ln1_g": (d,),
        "ln1_b": (d,),
        "W_qkv": (3 * d, d),
        "ln2_g": (d,),
        "ln2_b": (d,),
        "W1": (m, d),
        "b1": (m,),
        "W2": (d, m),
        "b2": (d,),
        "lnf_g": (d,),
        "lnf_b": (d,),
        "head_w": (1, d),
        "head_b": (1,),
    }


def init_params(cfg: Config, rng: np.random.Generator, given: dict | None = None) -> dict[str, np.ndarray]:
    """PyTorch's default initialization, drawn from the run's init stream in
    the order of :data:`PARAMS`: Linear weights and biases U(-1/sqrt(fan_in),
    1/sqrt(fan_in)), LayerNorm gains 1 and biases 0, the CLS token
    N(0, init_cls_scale^2). Arrays in ``given`` replace the draws (the draws
    are made anyway, so the others do not depend on which are given)."""
    d, m = cfg.d, cfg.mlp_dim
    shapes = param_shapes(d, m)
    bound = {
        "W_qkv": 1 / math.sqrt(d),
        "W1": 1 / math.sqrt(d),
        "b1": 1 / math.sqrt(d),
        "W2": 1 / math.sqrt(m),
        "b2": 1 / math.sqrt(m),
        "head_w": 1 / math.sqrt(d),
        "head_b": 1 / math.sqrt(d),
    }
    P = {}
    for name in PARAMS:
        shape = shapes[name]
        if name == "cls":
            v = cfg.init_cls_scale * rng.standard_normal(shape)
        elif name in bound:  # the weight matrices' halves drawn at once (the same numbers)
            v = uniform_fill(rng, -bound[name], bound[name], np.empty(shape))
        else:
            v = np.ones(shape) if name.endswith("_g") else np.zeros(shape)
        P[name] = v
    for name, v in (given or {}).items():
        if v.shape != shapes[name]:
            raise DataError(
                f"array {name!r} has shape {v.shape}, expected {shapes[name]} (d={d}, mlp_dim={m})"
            )
        P[name] = np.array(v, dtype=np.float64)
    return P
