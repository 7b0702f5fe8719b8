"""Bases and factors of the reduced engine (Cholesky-QR with checks, SVD fallbacks), and
the X W form's token Gram matrix with its factor, made once per problem."""

from __future__ import annotations

import numpy as np
from scipy.linalg import blas, lapack

from .buffers import XW_MAX_COND


def orthonormal_basis(
    A: np.ndarray, rtol: float = 1e-10, with_factor: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Orthonormal basis Q (d, k) of the column span of A (d, m); with
    ``with_factor`` also T (k, m) with A = Q T.

    Cholesky-QR of the m x m Gram matrix (d m^2 flops, cheaper than
    Householder QR for d >> m). The Gram matrix of the result is checked: if
    it is the identity to 1e-13 (well-conditioned input, the usual case for
    noisy tokens) one pass is enough, otherwise a second pass restores
    orthogonality to machine precision. Rank-deficient or ill-conditioned
    input falls back to an SVD that drops directions below ``rtol`` times the
    largest singular value.
    """
    if A.shape[1] == 0:
        Q = np.zeros((A.shape[0], 0))
        return (Q, np.zeros((0, 0))) if with_factor else Q
    try:
        L1 = np.linalg.cholesky(A.T @ A)
        Q = _times_inverse_transpose(A, L1)  # A = Q L1^T
        G = Q.T @ Q
        eye = np.eye(G.shape[0])
        if np.abs(G - eye).max() < 1e-13:
            return (Q, L1.T) if with_factor else Q
        L2 = np.linalg.cholesky(G)
        if np.abs(L2 - eye).max() < 1e-8 and np.abs(np.diag(L1)).min() > 1e-6:
            Q = _times_inverse_transpose(Q, L2)  # A = Q L2^T L1^T
            return (Q, L2.T @ L1.T) if with_factor else Q
    except np.linalg.LinAlgError:
        pass
    U, sv, Vt = np.linalg.svd(A, full_matrices=False)
    keep = sv > rtol * sv[0]
    Q = np.ascontiguousarray(U[:, keep])
    return (Q, sv[keep, None] * Vt[keep]) if with_factor else Q


def _times_inverse_transpose(A: np.ndarray, L: np.ndarray) -> np.ndarray:
    """A L^-T (C-contiguous) for a lower-triangular L (m x m), by L's explicit
    inverse and one triangular product (BLAS dtrmm on the Fortran view A^T:
    L^-1 A^T, half the flops of a general product, 5.5 -> 3.2 s at d = 12000,
    m = 3202): twice as fast here as a triangular solve with d right-hand sides
    (LAPACK's solve runs at a fraction of the product's rate for m = 162); the
    second pass and the Gram check of :func:`orthonormal_basis` see to the accuracy."""
    Linv, info = lapack.dtrtri(L, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError("singular triangular factor")
    return blas.dtrmm(1.0, Linv, np.asarray(A).T, lower=1).T


def psd_factor(G: np.ndarray) -> np.ndarray:
    """A factor U with U^T U = G for a symmetric positive semi-definite G
    known up to rounding (Cholesky; eigenvalues clipped at 0 when G is
    singular, as when W(0) R lies in span(Q))."""
    G = 0.5 * (G + G.T)
    try:
        return np.ascontiguousarray(np.linalg.cholesky(G).T)
    except np.linalg.LinAlgError:
        lam, V = np.linalg.eigh(G)
        return np.ascontiguousarray(np.sqrt(np.clip(lam, 0.0, None))[:, None] * V.T)


def extend_basis(Q: np.ndarray, v: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """Q with the direction of v outside span(Q) appended (if there is one)."""
    norm = np.linalg.norm(v)
    if norm == 0:
        return Q
    res = v - Q @ (Q.T @ v)
    res = res - Q @ (Q.T @ res)  # twice is enough (Kahan-Parlett)
    rn = np.linalg.norm(res)
    if rn <= rtol * norm:
        return Q
    return np.ascontiguousarray(np.concatenate([Q, (res / rn)[:, None]], axis=1))


def is_identity(W: np.ndarray) -> bool:
    """Whether W is exactly the identity matrix (k^2 comparisons, no product)."""
    return W.shape[0] == W.shape[1] == np.count_nonzero(W) and bool(np.all(np.diagonal(W) == 1.0))


def token_gram(X: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """K = X X^T and its lower Cholesky factor when K's condition number is at
    most ``XW_MAX_COND`` (LAPACK's estimate), else None."""
    K = np.ascontiguousarray(X @ X.T)
    L, info = lapack.dpotrf(K, lower=1, clean=1)
    if info != 0:
        return K, None
    rcond, info = lapack.dpocon(L, np.abs(K).sum(axis=0).max(), uplo="L")
    return K, (L if info == 0 and rcond * XW_MAX_COND >= 1.0 else None)


def made_once(shared: dict | None, key: str, of: tuple, make):
    """``make()``, or what it gave before for the same arrays ``of`` (``shared``: one
    problem's, whose run's and twins' steppers read these arrays and never write them:
    the same numbers, made once)."""
    hit = None if shared is None else shared.get(key)
    if hit is not None and len(hit[0]) == len(of) and all(a is b for a, b in zip(hit[0], of)):
        return hit[1]
    value = make()
    if shared is not None:
        shared[key] = (of, value)
    return value
