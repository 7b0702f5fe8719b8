"""Readable NumPy reference of the model, loss and gradients (SPEC §1).

Slow and obviously correct: the Numba kernels in :mod:`attnsim.kernels` are
tested against these functions, and these against finite differences.

Shapes: X (n, T, k) tokens, y (n,) labels, W (k, r), p (r,), nu (k,).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from .data import encoder_shapes

Array = np.ndarray


def forward(X: Array, W: Array, p: Array, nu: Array) -> tuple[Array, Array, Array, Array]:
    """Logits z, scores s, token values u (all (n, T)) and outputs f (n,)."""
    q = W @ p
    z = X @ q
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e / e.sum(axis=1, keepdims=True)
    u = X @ nu
    f = (s * u).sum(axis=1)
    return X @ q, s, u, f


def loss(X: Array, y: Array, W: Array, p: Array, nu: Array, kind: str = "logistic") -> float:
    """Mean loss: logistic log(1 + exp(-y f)) or linear -y f."""
    f = forward(X, W, p, nu)[3]
    m = y * f
    if kind == "linear":
        return float(np.mean(-m))
    return float(np.mean(np.logaddexp(0.0, -m)))


def grads(
    X: Array, y: Array, W: Array, p: Array, nu: Array, kind: str = "logistic"
) -> tuple[Array, Array, Array]:
    """(grad_W, grad_p, grad_nu) of :func:`loss`."""
    n = X.shape[0]
    _, s, u, f = forward(X, W, p, nu)
    if kind == "linear":
        a = -y / n
    else:
        a = -(y / n) / (1.0 + np.exp(y * f))  # -(y/n) * sigmoid(-y f)
    c = a[:, None] * s * (u - f[:, None])
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


def finite_difference_errors(
    loss_fn: Callable[..., float],
    grad_fn: Callable[..., Iterable[Array]],
    params: dict[str, Array],
    h: float = 1e-6,
) -> dict[str, dict]:
    """Central differences of ``loss_fn(*params)`` against ``grad_fn(*params)``.

    ``params`` maps block names (e.g. "W", "p", "nu") to arrays in call order.
    Returns per block the max and mean absolute error and the max error
    relative to ||analytic||_inf.
    """
    names = list(params)
    values = [np.array(v, dtype=np.float64) for v in params.values()]
    analytic = grad_fn(*values)
    out = {}
    for b, name in enumerate(names):
        fd = np.empty_like(values[b])
        flat, fd_flat = values[b].reshape(-1), fd.reshape(-1)
        for j in range(flat.size):
            old = flat[j]
            flat[j] = old + h
            up = loss_fn(*values)
            flat[j] = old - h
            down = loss_fn(*values)
            flat[j] = old
            fd_flat[j] = (up - down) / (2 * h)
        err = np.abs(fd - analytic[b])
        scale = np.abs(analytic[b]).max()
        out[name] = {
            "max_abs": float(err.max()),
            "mean_abs": float(err.mean()),
            "rel": float(err.max() / scale) if scale > 0 else float(err.max()),
        }
    return out


# -- the one-layer Transformer encoder (SPEC §12), every position computed ------

LN_EPS = 1e-5


def layer_norm(x: Array, g: Array, b: Array) -> Array:
    """LayerNorm over the last axis: biased variance, eps 1e-5, affine."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return g * (x - mean) / np.sqrt(var + LN_EPS) + b


def gelu(x: Array) -> Array:
    """The exact GELU x Phi(x) = x (1 + erf(x / sqrt 2)) / 2."""
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def encoder_forward(X: Array, P: dict[str, Array], skip: bool = True) -> dict[str, Array]:
    """The official one-layer encoder on every position of every sample.

    X (n, T, d) data tokens; P the parameters in PyTorch's shapes. A [CLS]
    token is prepended; pre-LayerNorm single-head self-attention (q, k, v by
    one bias-free linear map, scores scaled by 1/sqrt(d), softmax over all
    T + 1 keys, no output projection), a residual, a pre-LayerNorm MLP (exact
    GELU) with a residual (with ``skip`` false neither residual), a final
    LayerNorm and a linear head on the CLS position. Returns the output f (n,)
    and the attention (n, T+1, T+1) (row 0: the CLS query).
    """
    n, T, d = X.shape
    H0 = np.concatenate([np.broadcast_to(P["cls"].reshape(1, 1, d), (n, 1, d)), X], axis=1)
    U = layer_norm(H0, P["ln1_g"], P["ln1_b"])
    qkv = U @ P["W_qkv"].T
    q, k, v = qkv[..., :d], qkv[..., d : 2 * d], qkv[..., 2 * d :]
    logits = q @ k.transpose(0, 2, 1) / np.sqrt(d)
    A = np.exp(logits - logits.max(axis=-1, keepdims=True))
    A /= A.sum(axis=-1, keepdims=True)
    attended = A @ v
    H = attended + H0 if skip else attended
    M = gelu(layer_norm(H, P["ln2_g"], P["ln2_b"]) @ P["W1"].T + P["b1"]) @ P["W2"].T + P["b2"]
    Z = H + M if skip else M
    Zf = layer_norm(Z, P["lnf_g"], P["lnf_b"])
    f = Zf[:, 0] @ P["head_w"].reshape(-1) + P["head_b"].reshape(())
    return {"f": f, "attn": A}


def encoder_loss(X: Array, y: Array, P: dict[str, Array], skip: bool = True, kind: str = "logistic") -> float:
    """Mean loss of :func:`encoder_forward` (logistic or linear)."""
    m = y * encoder_forward(X, P, skip)["f"]
    return float(np.mean(-m)) if kind == "linear" else float(np.mean(np.logaddexp(0.0, -m)))


def random_encoder(
    seed: int = 0, n: int = 4, T: int = 3, d: int = 6, m: int = 5
) -> tuple[Array, Array, dict]:
    """A small random encoder problem with every parameter away from its
    initial value (LayerNorm gains and biases included), for gradient checks."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, T, d))
    y = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    P = {k: 0.5 * rng.standard_normal(s) for k, s in encoder_shapes(d, m).items()}
    for g in ("ln1_g", "ln2_g", "lnf_g"):
        P[g] += 1.0
    return X, y, P
