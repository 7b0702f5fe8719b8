"""Readable NumPy reference of the one-layer Transformer encoder (SPEC §12): every
position computed, as PyTorch does. The CLS-path kernels of :mod:`.kernels` are
tested against it, and it against finite differences (``attnsim check-grad``)."""

from __future__ import annotations

import numpy as np
from scipy.special import erf

from .params import param_shapes

Array = np.ndarray


LN_EPS = 1e-5


def layer_norm(x: Array, g: Array, b: Array) -> Array:
    """LayerNorm over the last axis: biased variance, eps 1e-5, affine."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return g * (x - mean) / np.sqrt(var + LN_EPS) + b


def gelu(x: Array) -> Array:
    """The exact GELU x Phi(x) = x (1 + erf(x / sqrt 2)) / 2."""
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
    P = {k: 0.5 * rng.standard_normal(s) for k, s in param_shapes(d, m).items()}
    for g in ("ln1_g", "ln2_g", "lnf_g"):
        P[g] += 1.0
    return X, y, P
