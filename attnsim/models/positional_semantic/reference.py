"""Readable NumPy reference of positional and semantic attention (Cui, Behrens, Krzakala and
Zdeborová, NeurIPS 2024; SPEC §18): the data, the teacher, the tied-weight student and its
loss and gradient written out on the tokens themselves. The fused kernels of :mod:`.kernels`
are tested against it, and it against central differences (``attnsim check-grad``).

Shapes: tokens X and noise xi (n, T, d); Q and Q* (d, r); A (T, T).
"""

from __future__ import annotations

import numpy as np

Array = np.ndarray


def signs(T: int) -> Array:
    """The positional embeddings' signs: p_l = s_l 1/sqrt(d), s = +1, -1, +1, ... (p_2 = -p_1)."""
    return np.where(np.arange(T) % 2 == 0, 1.0, -1.0)


def positions(T: int, d: int) -> Array:
    """(T, d) positional embeddings p_l = s_l (1, ..., 1) / sqrt(d), each of norm 1."""
    return signs(T)[:, None] * np.full(d, 1.0 / np.sqrt(d))


def row_softmax(Z: Array) -> Array:
    """Softmax over the last axis, shifted by the row maximum."""
    E = np.exp(Z - Z.max(axis=-1, keepdims=True))
    return E / E.sum(axis=-1, keepdims=True)


def scores(X: Array, Q: Array) -> tuple[Array, Array]:
    """h = X Q / sqrt(d) (n, T, r) and the tied attention softmax(h h^T) (n, T, T)."""
    h = X @ Q / np.sqrt(X.shape[-1])
    return h, row_softmax(h @ np.swapaxes(h, -1, -2))


def mixing(xi: Array, Q_star: Array, omega: float, A: Array) -> Array:
    """The teacher's (n, T, T) mixing M = (1 - omega) softmax((xi Q*/sqrt d)(xi Q*/sqrt d)^T) + omega A."""
    return (1.0 - omega) * scores(xi, Q_star)[1] + omega * np.asarray(A)


def teacher(xi: Array, Q_star: Array, omega: float, A: Array) -> Array:
    """Y = M xi: the teacher sees the noise tokens only, not their positions."""
    return mixing(xi, Q_star, omega, A) @ xi


def student(X: Array, Q: Array) -> Array:
    """Y_hat = softmax((X Q / sqrt d)(X Q / sqrt d)^T) X (query = key = Q, value = identity)."""
    return scores(X, Q)[1] @ X


def loss(X: Array, Y: Array, Q: Array) -> float:
    """The published loss: sum over samples and tokens of |Y_hat - Y|^2 / (2 d) (a sum, not a mean)."""
    return float(((student(X, Q) - Y) ** 2).sum() / (2 * X.shape[-1]))


def grad(X: Array, Y: Array, Q: Array) -> Array:
    """d loss / d Q (d, r), back through the softmax: G = R X^T / d with R = Y_hat - Y,
    E = S * (G - rowsum(S G)), dL/dh = (E + E^T) h, dL/dQ = sum_i X_i^T dL/dh_i / sqrt(d)."""
    d = X.shape[-1]
    h, S = scores(X, Q)
    R = S @ X - Y
    G = R @ np.swapaxes(X, -1, -2) / d
    E = S * (G - (S * G).sum(axis=-1, keepdims=True))
    dh = (E + np.swapaxes(E, -1, -2)) @ h
    return np.einsum("itd,itr->dr", X, dh) / np.sqrt(d)


def objective(X: Array, Y: Array, Q: Array, weight_decay: float) -> float:
    """What GD with torch SGD's weight decay descends: the summed loss + (lambda/2)|Q|^2."""
    return loss(X, Y, Q) + 0.5 * weight_decay * float((Q**2).sum())
