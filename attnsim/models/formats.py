"""The number formats of the precision twins (SPEC §16), shared by the models: which
NumPy type holds each, its unit roundoff, and bfloat16's rounding (plain NumPy; the
attention twin's kernels round with their own Numba copy)."""

from __future__ import annotations

import numpy as np

FORMATS = {"float32": (np.float32, False), "bfloat16": (np.float32, True), "float64": (np.float64, False)}
UNIT_ROUNDOFF = {"float32": 2.0**-24, "bfloat16": 2.0**-8, "float64": 2.0**-53}


def round_bf16(a: np.ndarray) -> np.ndarray:
    """Round the float32 array ``a`` to bfloat16 in place (8 mantissa bits, to nearest,
    ties to even, as torch's CPU casts); NaN stays NaN, overflow goes to inf. Returns ``a``."""
    flat = a.reshape(-1)
    nan = np.flatnonzero(np.isnan(flat))
    b = flat.view(np.uint32)
    lsb = b >> 16
    lsb &= 1
    b += np.uint32(0x7FFF)  # in place: only NaN bit patterns can wrap, and they are reset below
    b += lsb
    b &= np.uint32(0xFFFF0000)
    b[nan] = 0x7FC00000
    return a


def to_format(a: np.ndarray, fmt: str) -> np.ndarray:
    """A C-contiguous copy of ``a`` holding the values of the format ``fmt``
    (bfloat16 values in float32 arrays, rounded to nearest even)."""
    dtype, bf = FORMATS[fmt]
    out = np.array(a, dtype=dtype, order="C", copy=True)
    return round_bf16(out) if bf else out
