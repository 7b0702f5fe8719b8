"""Scrambled Sobol points (Owen-type random linear scrambles with a digital shift) for the
population metrics' bulk expectations.

Hand-written rather than scipy.stats.qmc: importing scipy.stats costs 0.44-0.7 s of every
run's start-up (docs/design.md), and SciPy keeps its table of initial direction numbers in a
private file. attnsim ships its own copy of that table, ``joe_kuo.npz``: the primitive
polynomials and initial direction numbers of Joe and Kuo's new-joe-kuo-6.21201 (S. Joe and
F. Y. Kuo, "Constructing Sobol sequences with better two-dimensional projections", SIAM J.
Sci. Comput. 30, 2635-2654, 2008; the same numbers scipy.stats.qmc.Sobol uses:
``tests/test_attention_population.py`` checks the unscrambled points against it). Their
notice: Copyright (c) 2008, Frances Y. Kuo and Stephen Joe. All rights reserved.
Redistribution and use in source and binary forms, with or without modification, are
permitted provided that the copyright notice, this list of conditions and the disclaimer are
retained; THE DATA IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from scipy.special import ndtri

N_SCRAMBLES = 8
SOBOL_BITS = 30


@functools.lru_cache(maxsize=1)
def _joe_kuo() -> tuple[np.ndarray, np.ndarray]:
    """Joe & Kuo's primitive polynomials and initial direction numbers
    (new-joe-kuo-6.21201), from the table attnsim ships (the module's note)."""
    with np.load(Path(__file__).with_name("joe_kuo.npz")) as f:
        return f["poly"].astype(np.int64), f["vinit"].astype(np.int64)


def sobol_direction_numbers(dim: int, bits: int = SOBOL_BITS) -> np.ndarray:
    """(dim, bits) direction numbers v[j, b] as ``bits``-bit integers, generator
    bit b of coordinate j (Bratley & Fox's recurrence, as scipy.stats.qmc.Sobol)."""
    poly, vinit = _joe_kuo()
    if dim > poly.size:
        raise ValueError(f"Sobol points: at most {poly.size} dimensions, got {dim}")
    v = np.zeros((dim, bits), dtype=np.int64)
    v[0, :] = 1
    for d in range(1, dim):
        p = int(poly[d])
        m = p.bit_length() - 1
        v[d, :m] = vinit[d, :m]
        for j in range(m, bits):
            new = int(v[d, j - m])
            pow2 = 1
            for k in range(m):
                pow2 <<= 1
                if (p >> (m - 1 - k)) & 1:
                    new ^= pow2 * int(v[d, j - k - 1])
            v[d, j] = new
    return v << np.arange(bits - 1, -1, -1, dtype=np.int64)


def _scramble_directions(
    v: np.ndarray, rng: np.random.Generator, count: int
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` random linear matrix scrambles with digital shifts of the
    direction numbers v (dim, bits) (Matousek 1998): (count, dim, bits)
    scrambled direction numbers and (count, dim) shifts.

    Per scramble, in this order from ``rng``: a lower-triangular binary matrix
    L_j with unit diagonal per coordinate (its strictly lower part drawn as a
    (dim, bits, bits) array of bits), then the shifts. Bit p (most significant
    first) of scrambled v[j, q] is the parity of row p of L_j against the bits
    of v[j, q]: the GF(2) product L_j B_j of the bit matrix B_j of v[j],
    formed as a float64 matrix product (integer sums of at most ``bits``
    ones, exact) reduced mod 2, and packed again by one product with the
    powers of two (sums of distinct powers below 2^bits, exact).
    """
    dim, bits = v.shape
    low = np.empty((count, dim, bits, bits))
    shift = np.empty((count, dim), dtype=np.int64)
    for r in range(count):
        low[r] = np.tril(rng.integers(0, 2, size=(dim, bits, bits), dtype=np.int64), -1)
        shift[r] = rng.integers(0, 1 << bits, size=dim, dtype=np.int64)
    msb = bits - 1 - np.arange(bits, dtype=np.int64)  # bit p of the integer, most significant first
    B = ((v[:, None, :] >> msb[None, :, None]) & 1).astype(np.float64)  # (dim, p, q)
    S = np.matmul(low, B) + B  # the unit diagonal adds B itself
    return np.matmul(np.ldexp(1.0, msb), S - 2.0 * np.floor(0.5 * S)).astype(np.int64), shift


def _gray_points(v: np.ndarray, shift: np.ndarray, m: int) -> np.ndarray:
    """(2^m, dim) integer points of direction numbers v (dim, bits) XOR
    ``shift``, in Gray-code order: the Gray code of 2^b + i is 2^b plus that of
    2^b - 1 - i, so each doubling appends the points so far, reversed, XOR
    v[:, b]."""
    x = np.empty((1 << m, shift.size), dtype=np.int64)
    x[0] = shift
    for b in range(m):
        h = 1 << b
        np.bitwise_xor(x[h - 1 :: -1] if h > 1 else x[:1], v[:, b], out=x[h : 2 * h])
    return x


def sobol_integers(v: np.ndarray, m: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """(2^m, dim) Sobol points as integers in [0, 2^bits), in Gray-code order.

    With ``rng``: a random linear matrix scramble and a random digital shift
    (:func:`_scramble_directions`); the points stay a (t, m, s)-net and each is uniform
    on the cube.
    """
    if rng is None:
        return _gray_points(v, np.zeros(v.shape[0], dtype=np.int64), m)
    vs, shift = _scramble_directions(v, rng, 1)
    return _gray_points(vs[0], shift[0], m)


def sobol_normals(T: int, points: int, rng: np.random.Generator) -> np.ndarray:
    """(N_SCRAMBLES, points / N_SCRAMBLES, T) standard normals from independent
    scrambles of a Sobol sequence (``rng``: the run's population stream; the
    same numbers as one :func:`sobol_integers` call per scramble, all
    scrambles' points built at once)."""
    m = int(np.log2(max(points // N_SCRAMBLES, 1)))
    vs, shift = _scramble_directions(sobol_direction_numbers(T), rng, N_SCRAMBLES)
    x = _gray_points(vs.reshape(N_SCRAMBLES * T, -1), shift.reshape(-1), m)  # (2^m, scramble and coordinate)
    x = x.reshape(1 << m, N_SCRAMBLES, T).transpose(1, 0, 2)
    return ndtri((x + 0.5) * 2.0**-SOBOL_BITS)  # cell midpoints: never 0 or 1
