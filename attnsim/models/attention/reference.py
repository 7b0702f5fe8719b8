"""Readable NumPy reference of the model, loss and gradients (SPEC §1).

Slow and obviously correct: the Numba kernels in :mod:`.kernels` are
tested against these functions, and these against finite differences.

Shapes: X (n, T, k) tokens, y (n,) labels, W (k, r), p (r,), nu (k,).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

Array = np.ndarray


def weights(z: Array, attention: str = "softmax") -> Array:
    """Unnormalized scores of logits z (n, T): e^(z - max z) (softmax), or StableMax's
    z + 1 for z >= 0 and 1 / (1 - z) below."""
    if attention == "stablemax":
        return np.where(z >= 0, z + 1.0, 1.0 / (1.0 - np.minimum(z, 0.0)))
    return np.exp(z - z.max(axis=1, keepdims=True))


def forward(
    X: Array, W: Array, p: Array, nu: Array, attention: str = "softmax"
) -> tuple[Array, Array, Array, Array]:
    """Logits z, scores s, token values u (all (n, T)) and outputs f (n,)."""
    q = W @ p
    e = weights(X @ q, attention)
    s = e / e.sum(axis=1, keepdims=True)
    u = X @ nu
    f = (s * u).sum(axis=1)
    return X @ q, s, u, f


def loss(
    X: Array, y: Array, W: Array, p: Array, nu: Array, kind: str = "logistic", attention: str = "softmax"
) -> float:
    """Mean loss: logistic log(1 + exp(-y f)) or linear -y f."""
    f = forward(X, W, p, nu, attention)[3]
    m = y * f
    if kind == "linear":
        return float(np.mean(-m))
    return float(np.mean(np.logaddexp(0.0, -m)))


def grads(
    X: Array, y: Array, W: Array, p: Array, nu: Array, kind: str = "logistic", attention: str = "softmax"
) -> tuple[Array, Array, Array]:
    """(grad_W, grad_p, grad_nu) of :func:`loss`. dL/dz_t = a s_t (u_t - f) times the
    weight's log-derivative: 1 for the softmax, 1 / (1 + |z_t|) for StableMax."""
    n = X.shape[0]
    z, s, u, f = forward(X, W, p, nu, attention)
    if kind == "linear":
        a = -y / n
    else:
        a = -(y / n) / (1.0 + np.exp(y * f))  # -(y/n) * sigmoid(-y f)
    c = a[:, None] * s * (u - f[:, None])
    if attention == "stablemax":
        c = c / (1.0 + np.abs(z))
    g = np.einsum("it,itk->k", c, X)
    g_nu = np.einsum("it,itk->k", a[:, None] * s, X)
    return np.outer(g, p), W.T @ g, g_nu


def gd_step(
    X: Array,
    y: Array,
    W: Array,
    p: Array,
    nu: Array,
    lr: float,
    train: Iterable[str] = ("W", "p"),
    kind: str = "logistic",
) -> tuple[Array, Array, Array]:
    """One full-batch GD step on the trained blocks; returns new (W, p, nu)."""
    gW, gp, gnu = grads(X, y, W, p, nu, kind)
    return (
        W - lr * gW if "W" in train else W,
        p - lr * gp if "p" in train else p,
        nu - lr * gnu if "nu" in train else nu,
    )


def random_instance(seed: int = 0, n: int = 4, T: int = 5, k: int = 6, r: int = 7) -> tuple[Array, ...]:
    """A small random problem with p != 0 and a rectangular W, for gradient checks."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, T, k))
    y = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    W = rng.standard_normal((k, r)) / np.sqrt(k)
    p = rng.standard_normal(r)
    nu = rng.standard_normal(k) / np.sqrt(k)
    return X, y, W, p, nu
