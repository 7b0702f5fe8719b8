"""Turning what a user wrote into a key's value: Python and NumPy bools, integers and reals
checked and made exact (finite, normal, exactly representable: -0.0 is 0.0), matrices as tuples
of rows, the ``train`` blocks in their canonical order, and ``--set`` text as a TOML literal."""

from __future__ import annotations

import math
import numbers
import sys
import tomllib
from typing import Any

from ._meta import ConfigError

TRAIN_BLOCKS = ("W", "p", "nu")
MAX_INT = 2**53  # integers above this are not exact in float64 (chi-square degrees of freedom, steps)


def scalar(name: str, kind: str, value: Any) -> Any:
    """``value`` as key ``name``'s ``kind`` ("bool", "int" or "float"), or a ConfigError."""
    if kind == "bool":
        if isinstance(value, bool) or _numpy_bool(value):
            return bool(value)
        raise ConfigError(f"{name}: expected true or false, got {value!r}")
    if kind == "int":
        if isinstance(value, bool) or _numpy_bool(value):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
            value = float(value)
            if math.isfinite(value) and value.is_integer():
                value = int(value)
        if not isinstance(value, numbers.Integral):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        value = int(value)
        if abs(value) > MAX_INT:
            raise ConfigError(f"{name}: at most 2^53 = {MAX_INT} (exact in float64), got {value}")
        return value
    if kind == "float":
        if isinstance(value, bool) or _numpy_bool(value) or not isinstance(value, numbers.Real):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{name}: must be finite, got {value!r}")
        value += 0.0  # -0.0 is 0.0: one point of a grid, one record
        if _subnormal(value):
            raise ConfigError(
                f"{name}: {value!r} is subnormal (below {sys.float_info.min:.3g}, the smallest normal "
                "float64): it has lost precision and underflows to 0 in products; use 0 or a normal number"
            )
        return value
    raise AssertionError(kind)  # pragma: no cover


def matrix(name: str, value: Any) -> tuple[tuple[float, ...], ...]:
    """A matrix key (a nested list in TOML, --set and JSON) as a tuple of rows of finite floats."""
    rows = value.tolist() if hasattr(value, "tolist") else value
    if isinstance(rows, (list, tuple)) and rows and all(isinstance(r, (list, tuple)) and r for r in rows):
        return tuple(tuple(_coerce_real(name, v) for v in r) for r in rows)
    raise ConfigError(
        f"{name}: expected a matrix as a nested list such as [[0.6, 0.4], [0.4, 0.6]], got {_short(value)}"
    )


def _short(value: Any, width: int = 60) -> str:
    """``repr(value)`` cut to ``width`` characters (a value nested hundreds deep stays one short line)."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _coerce_real(name: str, v: Any) -> float:
    if (
        isinstance(v, bool)
        or _numpy_bool(v)
        or not isinstance(v, numbers.Real)
        or not math.isfinite(float(v))
    ):
        raise ConfigError(f"{name}: every entry must be a finite number, got {_short(v)}")
    return float(v) + 0.0


def _subnormal(x: float) -> bool:
    return 0.0 < abs(x) < sys.float_info.min


def _numpy_bool(value: Any) -> bool:
    """A NumPy bool scalar (not registered as a number, and not a Python bool)."""
    dtype = getattr(value, "dtype", None)
    return dtype is not None and dtype.kind == "b" and getattr(value, "shape", None) == ()


_PLAIN = {"bool": bool, "int": int, "float": float}  # values of these exact types need no conversion


def normalize_train(text: str) -> str:
    """Canonical ``train`` string: "Wp", "p,nu", "nu, W" -> "W,p", "p,nu", "W,nu"."""
    rest = text.replace(",", "").replace(" ", "").replace("+", "").lower()
    found: set[str] = set()
    while rest:
        for token, block in (("nu", "nu"), ("w", "W"), ("p", "p")):
            if rest.startswith(token):
                found.add(block)
                rest = rest[len(token) :]
                break
        else:
            raise ConfigError(f'train: {text!r} is not a non-empty subset of W, p, nu (e.g. "W,p")')
    if not found:
        raise ConfigError("train: must name at least one of W, p, nu")
    return ",".join(b for b in TRAIN_BLOCKS if b in found)


def parse_scalar(text: str) -> Any:
    """Parse a ``--set`` value: TOML literal if it is one, else the bare string."""
    text = text.strip()
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        pass
    except RecursionError:  # tomllib parses nested arrays recursively
        raise ConfigError(
            f"--set: {text[:40]}... is nested too deep to read; no config key nests beyond 2"
        ) from None
    if not text.isascii():  # float() reads full-width and other scripts' digits: "５" would be 5
        return text
    try:
        return float(text)
    except ValueError:
        return text
