"""Draws of the attention model's engines in their own coordinates: the implicit
engine's Bartlett factors and the finite test sets (SPEC §4)."""

from __future__ import annotations

import numpy as np

from ...data.synthetic import DataKeys, add_means, clean_labels, draw_roles, shape_noise


def bartlett(
    rng: np.random.Generator, rows: int, cols: int, dof0: int, scale: float, lower: bool
) -> np.ndarray:
    """Triangular factor of a Gaussian matrix with ``dof0`` rows: diagonal
    scale * chi(dof0 - j), off-diagonal N(0, scale^2); (rows x cols), upper
    (or its transpose-shaped lower version with ``lower``). Draw order: the
    diagonal, then the strict triangle in row-major order of the upper form."""
    U = np.zeros((rows, cols))
    j = np.arange(min(rows, cols))
    U[j, j] = np.sqrt(rng.chisquare(dof0 - j))
    iu = np.triu_indices(rows, 1, cols)
    U[iu] = rng.standard_normal(iu[0].size)
    U *= scale
    return U.T if lower else U


def draw_implicit_noise(dk: DataKeys, rng: np.random.Generator) -> np.ndarray:
    """(n, T, nT + 2) token noise in the basis {e1, e2, token-noise span}:
    i.i.d. N(0, sigma^2) on e1, e2 (drawn first), then the lower-triangular
    Bartlett factor of the noise's other d - 2 coordinates."""
    n, T, d, sig = dk.n, dk.T, dk.d, dk.sigma
    m = n * T
    X = np.zeros((n, T, m + 2))
    X[:, :, :2] = sig * rng.standard_normal((n, T, 2))
    X[:, :, 2:] = bartlett(rng, m, m, d - 2, sig, lower=True).reshape(n, T, m)
    return X


def draw_implicit_init(
    scale: float, d: int, rng: np.random.Generator, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The implicit engine's W~(0) = B^T (B the R-factor of the d x k Gaussian
    W(0)^T Q) and U_perp (the Bartlett factor of the (d - k) x k Gaussian part
    of W(0) R outside span(Q), upper-trapezoidal when d - k < k), in that order
    (``scale``: the standard deviation of W(0)'s entries)."""
    s = scale
    B = bartlett(rng, k, k, d, s, lower=False)
    U_perp = bartlett(rng, min(k, d - k), k, d - k, s, lower=False)
    return np.ascontiguousarray(B.T), U_perp


def draw_test_set(
    dk: DataKeys,
    rng: np.random.Generator,
    k: int,
    mu_pos: np.ndarray,
    mu_neg: np.ndarray,
    U_perp: np.ndarray | None,
) -> tuple:
    """``test_n`` fresh clean samples in engine coordinates: (X2 (m*T, k),
    O (m*T, rows(U_perp)) or None, y (m,)). A fresh token is its mean plus
    sigma times k normals on Q; its product with the part of W(0) R outside
    span(Q) is sigma g . U_perp with rows(U_perp) more normals g, the same
    numbers at every step. Draw order: roles (if shuffled), the noise on Q
    (m, T, k), then the U_perp normals per token."""
    m = dk.test_n
    y = clean_labels(m)
    roles = draw_roles(dk.role_counts, dk.shuffle_roles, m, rng)
    X = dk.sigma * rng.standard_normal((m, dk.T, k))
    shape_noise(dk.data_model, X, roles, mu_pos)
    add_means(X, y, roles, dk.rho, mu_pos, mu_neg)
    outside = None
    if U_perp is not None and U_perp.shape[0] > 0:
        outside = dk.sigma * (rng.standard_normal((m * dk.T, U_perp.shape[0])) @ U_perp)
    return X.reshape(m * dk.T, k), outside, y
