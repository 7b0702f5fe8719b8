"""The encoder's linear algebra: every matrix product of a step through one
BLAS library, the d x d gradients as factors applied in place, and the
rank-one updates of W_q and W_k held back between passes.

Every matrix product of a step goes to SciPy's BLAS: NumPy ships its own
OpenBLAS, and two OpenBLAS thread pools taking turns on two cores doubled a
step's time (the threads of one spin while the other works). The arrays are
C-ordered; their transposes are the Fortran arrays BLAS takes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.linalg import blas


def mv(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A @ x."""
    return blas.dgemv(1.0, A.T, x, trans=1)


def mtv(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A.T @ x."""
    return blas.dgemv(1.0, A.T, x)


def mm_t(U: np.ndarray, W: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """U @ W.T (rows of U through the linear map W), C-ordered (into ``out`` when given)."""
    if out is None:
        return blas.dgemm(1.0, W.T, U.T, trans_a=1).T
    return blas.dgemm(1.0, W.T, U.T, beta=0.0, c=out.T, trans_a=1, overwrite_c=1).T


def mm(D: np.ndarray, W: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """D @ W (back-propagation through W), C-ordered (into ``out`` when given)."""
    if out is None:
        return blas.dgemm(1.0, W.T, D.T).T
    return blas.dgemm(1.0, W.T, D.T, beta=0.0, c=out.T, overwrite_c=1).T


def dot(x: np.ndarray, y: np.ndarray) -> float:
    return float(blas.ddot(x, y))


def rows_dot(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A @ x for a matrix of a few rows (samples or tokens): NumPy's own loop;
    BLAS would wake its threads for it."""
    return np.einsum("ij,j->i", A, x)


def rows_sum(A: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A.T @ w for a matrix of a few rows, without BLAS."""
    return np.einsum("ij,i->j", A, w)


class Held:
    """The rank-one updates of W_q and W_k held back: the true W_q is
    W_q - A_q^T B_q over the rows held (W_k likewise), its products corrected
    by those rows, and every ``cap`` steps (or when the parameters are read:
    :meth:`apply`) they go into the matrices as one rank-``cap`` product. A
    step then reads W_q and W_k twice each and writes them never, instead of
    also updating them in a third pass; the values differ from updating at
    every step by rounding only."""

    def __init__(self, d: int, cap: int = 32):
        self.A, self.B = np.zeros((2, cap, d)), np.zeros((2, cap, d))
        self.k, self.cap = 0, cap

    def mv(self, j: int, W: np.ndarray, x: np.ndarray) -> np.ndarray:
        """W_true @ x for W_q (j = 0) or W_k (j = 1)."""
        y = mv(W, x)
        if self.k:
            y -= rows_sum(self.A[j, : self.k], rows_dot(self.B[j, : self.k], x))
        return y

    def mtv(self, j: int, W: np.ndarray, x: np.ndarray) -> np.ndarray:
        """W_true.T @ x."""
        y = mtv(W, x)
        if self.k:
            y -= rows_sum(self.B[j, : self.k], rows_dot(self.A[j, : self.k], x))
        return y

    def add(self, Wqkv: np.ndarray, lr: float, gq: Outer, gk: Outer) -> None:
        """Hold W_q -= lr gq and W_k -= lr gk (rank one each); apply when full."""
        self.A[0, self.k], self.B[0, self.k] = lr * gq.a[0], gq.b[0]
        self.A[1, self.k], self.B[1, self.k] = lr * gk.a[0], gk.b[0]
        self.k += 1
        if self.k == self.cap:
            self.apply(Wqkv)

    def apply(self, Wqkv: np.ndarray) -> None:
        d, k = Wqkv.shape[1], self.k
        if k:
            for j in (0, 1):
                Outer(self.A[j, :k], self.B[j, :k]).subtract_from(Wqkv[j * d : (j + 1) * d], 1.0)
        self.k = 0


class NoneHeld:
    """W_q and W_k as they are (no updates held)."""

    @staticmethod
    def mv(j: int, W: np.ndarray, x: np.ndarray) -> np.ndarray:
        return mv(W, x)

    @staticmethod
    def mtv(j: int, W: np.ndarray, x: np.ndarray) -> np.ndarray:
        return mtv(W, x)


class Outer(NamedTuple):
    """A weight gradient sum_s a_s b_s^T kept as its factors a (s, rows) and
    b (s, cols): the d x d gradients of the encoder have rank n (or 1), and
    applying them in place spares writing and reading d x d temporaries."""

    a: np.ndarray
    b: np.ndarray

    def dense(self, out: np.ndarray | None = None) -> np.ndarray:
        """a^T b as a C-ordered array (into ``out`` when given), through SciPy's BLAS: NumPy's
        matmul would wake its own OpenBLAS's threads (the module docstring)."""
        out = np.empty((self.a.shape[1], self.b.shape[1])) if out is None else out
        blas.dgemm(1.0, self.b.T, self.a.T, beta=0.0, c=out.T, trans_b=1, overwrite_c=1)
        return out

    def subtract_from(self, W: np.ndarray, lr: float) -> None:
        """W -= lr a^T b in place, in one read and write of W (on the Fortran
        view W^T = W^T - lr b^T a: BLAS dger for rank one, dgemm otherwise)."""
        if self.a.shape[0] == 1:
            blas.dger(-lr, self.b[0], self.a[0], a=W.T, overwrite_a=1)
        else:
            blas.dgemm(-lr, self.b.T, self.a.T, beta=1.0, c=W.T, trans_b=1, overwrite_c=1)


def dense_grads(G: dict) -> dict[str, np.ndarray]:
    """The gradients as arrays in the parameters' shapes."""
    out = {}
    for k, g in G.items():
        if isinstance(g, Outer):
            g = g.dense()
        elif isinstance(g, list):  # W_qkv's row blocks, written into one array
            rows = [part.a.shape[1] for part in g]
            whole = np.empty((sum(rows), g[0].b.shape[1]))
            for part, lo, hi in zip(g, np.cumsum([0, *rows[:-1]]), np.cumsum(rows)):
                part.dense(whole[lo:hi])
            g = whole
        out[k] = g
    return out


def update(P: dict, G: dict, lr: float) -> None:
    """Gradient descent in place: P -= lr G (W_qkv's gradient is three Outer row blocks)."""
    for k, g in G.items():
        if isinstance(g, Outer):
            g.subtract_from(P[k], lr)
        elif isinstance(g, list):
            rows = P[k].shape[0] // len(g)
            for j, part in enumerate(g):
                part.subtract_from(P[k][j * rows : (j + 1) * rows], lr)
        else:
            P[k] -= lr * g


def all_zero(G: dict) -> bool:
    parts = [p for g in G.values() for p in (g if isinstance(g, list) else [g])]
    return not any(np.any(p.a) and np.any(p.b) if isinstance(p, Outer) else np.any(p) for p in parts)
