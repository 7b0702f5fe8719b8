"""The one-layer Transformer encoder (SPEC §12): the CLS path only, with
hand-derived gradients; BLAS-3 shaped NumPy for the matrix products and Numba
for the per-token LayerNorm, softmax and GELU passes.

Only the CLS position reaches the output, and the CLS query is the same for
every sample (it is the learned token c through LN1 and W_q): so the keys
enter through one d-vector kappa = W_k^T q, the values through the
attention-weighted mean of the normalized tokens, and the MLP runs on n rows.

Forward (per sample; u_t = LN1(h0_t) for h0 = [c, x_1 .. x_T]; W_q, W_k, W_v
the three row blocks of W_qkv; d the width, m the MLP width)::

    q = W_q u_c,  kappa = W_k^T q,  l_t = kappa . u_t / sqrt(d),  a = softmax(l)   (t = c, 1..T)
    ubar = sum_t a_t u_t,  o = W_v ubar,  h = o + c   (skip; o without it)
    r = W1 LN2(h) + b1,  z = h + W2 gelu(r) + b2   (skip; without it z = W2 gelu(r) + b2)
    f = w . LNf(z) + b,   L = (1/n) sum_i l(y_i f_i)

Gradient derivation (backward in reverse order; delta_x = dL/dx):

    delta_f = a_i = (1/n) l'(y f) y            (-(y/n) sigma(-y f) for the logistic loss)
    dw = sum_i a_i LNf(z_i),  db = sum_i a_i,  delta_LNf(z) = a_i w
    LayerNorm y = g * nhat + beta, nhat = (x - mean) * rstd:
        dg = sum delta_y * nhat,  dbeta = sum delta_y,
        delta_x = rstd * (gh - mean(gh) - nhat * mean(gh * nhat)),  gh = delta_y * g
    z:   delta_h = delta_z (skip) ;  dW2 = delta_z^T gelu(r), db2 = sum delta_z,
         delta_r = (delta_z W2) * gelu'(r),  gelu'(r) = Phi(r) + r phi(r),
         dW1 = delta_r^T LN2(h), db1 = sum delta_r, delta_h += LN2-backward(delta_r W1)
    h:   delta_c += sum_i delta_h (skip),  delta_o = delta_h
    o:   dW_v = delta_o^T ubar,  delta_ubar = delta_o W_v
    ubar: delta_a_t = u_t . delta_ubar,  delta_u_t = a_t delta_ubar
    softmax: delta_l_t = a_t (delta_a_t - sum_s a_s delta_a_s)
    l:   delta_kappa = sum_{i,t} delta_l_t u_t / sqrt(d),  delta_u_t += delta_l_t kappa / sqrt(d)
    kappa: dW_k = q delta_kappa^T,  delta_q = W_k delta_kappa
    q:   dW_q = delta_q u_c^T,  delta_u_c += W_q^T delta_q
    u:   LN1-backward of every delta_u_t (gains and biases); delta_c += that of the CLS token

Every ``@njit`` function here calls only functions of this file. They run on
one thread: the BLAS products around them use every core, and OpenBLAS threads
that spin after a product would slow a parallel Numba loop down.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit
from scipy.linalg import blas
from scipy.special import ndtr

from ...runtime import numba_cache  # noqa: F401  (before any kernel loads)
from ...runtime.numba_cache import CACHE, FASTMATH
from .params import param_shapes

LN_EPS = 1e-5
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(cache=CACHE, fastmath=FASTMATH)
def _ln_rows(x, g, b, nhat, rstd, out):
    """LayerNorm of every row of x (rows, d): nhat, 1/std and g * nhat + b."""
    rows, d = x.shape
    for i in range(rows):
        mean = 0.0
        for j in range(d):
            mean += x[i, j]
        mean /= d
        var = 0.0
        for j in range(d):
            var += (x[i, j] - mean) ** 2
        r = 1.0 / math.sqrt(var / d + LN_EPS)
        rstd[i] = r
        for j in range(d):
            nhat[i, j] = (x[i, j] - mean) * r
            out[i, j] = g[j] * nhat[i, j] + b[j]


@njit(cache=CACHE, fastmath=FASTMATH)
def _ln_back_rows(dy, g, nhat, rstd, dx):
    """Input gradient of :func:`_ln_rows` for every row."""
    rows, d = dy.shape
    for i in range(rows):
        m1 = 0.0
        m2 = 0.0
        for j in range(d):
            gh = dy[i, j] * g[j]
            m1 += gh
            m2 += gh * nhat[i, j]
        m1 /= d
        m2 /= d
        for j in range(d):
            dx[i, j] = rstd[i] * (dy[i, j] * g[j] - m1 - nhat[i, j] * m2)


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(out, nhat, rstd) of the LayerNorm of the rows of a 2-d array."""
    nhat, out, rstd = np.empty_like(x), np.empty_like(x), np.empty(x.shape[0])
    _ln_rows(x, g, b, nhat, rstd, out)
    return out, nhat, rstd


def layer_norm_back(dy: np.ndarray, g: np.ndarray, nhat: np.ndarray, rstd: np.ndarray) -> np.ndarray:
    dx = np.empty_like(dy)
    _ln_back_rows(dy, g, nhat, rstd, dx)
    return dx


class Outer(NamedTuple):
    """A weight gradient sum_s a_s b_s^T kept as its factors a (s, rows) and
    b (s, cols): the d x d gradients of the encoder have rank n (or 1), and
    applying them in place spares writing and reading d x d temporaries."""

    a: np.ndarray
    b: np.ndarray

    def dense(self) -> np.ndarray:
        return self.a.T @ self.b

    def subtract_from(self, W: np.ndarray, lr: float) -> None:
        """W -= lr a^T b in place (BLAS dgemm on the Fortran view W^T = ... - lr b^T a)."""
        blas.dgemm(-lr, self.b.T, self.a.T, beta=1.0, c=W.T, trans_b=1, overwrite_c=1)


def dense_grads(G: dict) -> dict[str, np.ndarray]:
    """The gradients as arrays in the parameters' shapes."""
    out = {}
    for k, g in G.items():
        if isinstance(g, Outer):
            g = g.dense()
        elif isinstance(g, list):
            g = np.concatenate([part.dense() for part in g], axis=0)
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


def gelu(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact GELU r Phi(r) and its derivative Phi(r) + r phi(r)."""
    cdf = ndtr(r)
    pdf = np.exp(-0.5 * r * r) * _INV_SQRT2PI
    return r * cdf, cdf + r * pdf


def forward(X2: np.ndarray, n: int, T: int, P: dict, skip: bool) -> dict:
    """The CLS path of the encoder for tokens X2 (n*T, d); returns every
    intermediate the backward pass needs (f: (n,) outputs, a: (n, T+1)
    attention of the CLS query, column 0 on the CLS token itself)."""
    d = X2.shape[1]
    c = P["cls"].reshape(d)
    g1, b1n = P["ln1_g"], P["ln1_b"]
    ux, nx, rx = layer_norm(X2, g1, b1n)  # (n*T, d)
    uc, nc, rc = layer_norm(c[None, :], g1, b1n)
    Wqkv = P["W_qkv"]
    Wq, Wk, Wv = Wqkv[:d], Wqkv[d : 2 * d], Wqkv[2 * d :]
    q = Wq @ uc[0]
    kappa = Wk.T @ q
    s = 1.0 / math.sqrt(d)
    lx = (ux @ kappa).reshape(n, T) * s
    lc = float(uc[0] @ kappa) * s
    logits = np.concatenate([np.full((n, 1), lc), lx], axis=1)
    a = np.exp(logits - logits.max(axis=1, keepdims=True))
    a /= a.sum(axis=1, keepdims=True)
    ubar = a[:, :1] * uc + np.einsum("it,itd->id", a[:, 1:], ux.reshape(n, T, d))
    o = ubar @ Wv.T
    h = o + c if skip else o
    h2, n2, r2 = layer_norm(h, P["ln2_g"], P["ln2_b"])
    r = h2 @ P["W1"].T + P["b1"]
    gr, dgr = gelu(r)
    mlp = gr @ P["W2"].T + P["b2"]
    z = h + mlp if skip else mlp
    zf, nf, rf = layer_norm(z, P["lnf_g"], P["lnf_b"])
    f = zf @ P["head_w"].reshape(d) + P["head_b"].reshape(())
    return dict(
        ux=ux,
        nx=nx,
        rx=rx,
        uc=uc,
        nc=nc,
        rc=rc,
        q=q,
        kappa=kappa,
        logits=logits,
        a=a,
        ubar=ubar,
        h=h,
        h2=h2,
        n2=n2,
        r2=r2,
        gr=gr,
        dgr=dgr,
        zf=zf,
        nf=nf,
        rf=rf,
        f=f,
    )


def backward(X2: np.ndarray, n: int, T: int, P: dict, skip: bool, cache: dict, df: np.ndarray) -> dict:
    """Gradients of sum_i df_i f_i with respect to every parameter (the
    derivation is in the module docstring): arrays in the parameters' shapes,
    the weight matrices as :class:`Outer` factors (W_qkv as its three row
    blocks; :func:`dense_grads` makes arrays of them)."""
    d = X2.shape[1]
    s = 1.0 / math.sqrt(d)
    Wqkv = P["W_qkv"]
    Wq, Wk, Wv = Wqkv[:d], Wqkv[d : 2 * d], Wqkv[2 * d :]
    G = {}
    w = P["head_w"].reshape(d)
    G["head_w"] = (df @ cache["zf"]).reshape(1, d)
    G["head_b"] = np.array([df.sum()])
    dzf = df[:, None] * w
    G["lnf_g"] = np.einsum("id,id->d", dzf, cache["nf"])
    G["lnf_b"] = dzf.sum(axis=0)
    dz = layer_norm_back(dzf, P["lnf_g"], cache["nf"], cache["rf"])
    G["W2"] = Outer(dz, cache["gr"])
    G["b2"] = dz.sum(axis=0)
    dr = (dz @ P["W2"]) * cache["dgr"]
    G["W1"] = Outer(dr, cache["h2"])
    G["b1"] = dr.sum(axis=0)
    dh2 = dr @ P["W1"]
    G["ln2_g"] = np.einsum("id,id->d", dh2, cache["n2"])
    G["ln2_b"] = dh2.sum(axis=0)
    dh = layer_norm_back(dh2, P["ln2_g"], cache["n2"], cache["r2"])
    if skip:
        dh += dz
    dc = dh.sum(axis=0) if skip else np.zeros(d)
    G_Wv = Outer(dh, cache["ubar"])
    dubar = dh @ Wv
    a, uc, ux = cache["a"], cache["uc"][0], cache["ux"].reshape(n, T, d)
    da = np.concatenate([(dubar @ uc)[:, None], np.einsum("itd,id->it", ux, dubar)], axis=1)
    dl = a * (da - (a * da).sum(axis=1, keepdims=True))
    kappa = cache["kappa"]
    dkappa = s * (dl[:, 0].sum() * uc + np.einsum("it,itd->d", dl[:, 1:], ux))
    dux = a[:, 1:, None] * dubar[:, None, :] + s * dl[:, 1:, None] * kappa
    duc = a[:, 0] @ dubar + s * dl[:, 0].sum() * kappa
    q = cache["q"]
    G_Wk = Outer(q[None, :], dkappa[None, :])
    dq = Wk @ dkappa
    G_Wq = Outer(dq[None, :], uc[None, :])
    duc = duc + Wq.T @ dq
    dux2 = dux.reshape(n * T, d)
    G["ln1_g"] = np.einsum("rd,rd->d", dux2, cache["nx"]) + duc * cache["nc"][0]
    G["ln1_b"] = dux2.sum(axis=0) + duc
    dc = dc + layer_norm_back(duc[None, :], P["ln1_g"], cache["nc"], cache["rc"])[0]
    G["cls"] = dc.reshape(1, 1, d)
    G["W_qkv"] = [G_Wq, G_Wk, G_Wv]
    return G


def loss_coefficients(f: np.ndarray, y: np.ndarray, loss: str) -> tuple[float, np.ndarray]:
    """The mean loss and dL/df of the outputs f."""
    n = y.size
    m = y * f
    if loss == "linear":
        return float(np.mean(-m)), -y / n
    sig = np.exp(-np.logaddexp(0.0, m))  # sigma(-m), stable
    return float(np.mean(np.logaddexp(0.0, -m))), -(y / n) * sig


def loss_and_grads(
    X: np.ndarray, y: np.ndarray, P: dict, skip: bool = True, loss: str = "logistic"
) -> tuple[float, dict]:
    """(mean loss, gradients) of the encoder on X (n, T, d)."""
    n, T, d = X.shape
    X2 = np.ascontiguousarray(X.reshape(n * T, d), dtype=np.float64)
    P = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in P.items()}
    cache = forward(X2, n, T, P, skip)
    L, df = loss_coefficients(cache["f"], y, loss)
    return L, dense_grads(backward(X2, n, T, P, skip, cache, df))


def warmup() -> None:
    X, y = np.zeros((2, 2, 3)), np.array([1.0, -1.0])
    P = {k: np.ones(s) for k, s in param_shapes(3, 2).items()}
    X[0, 0, 0] = 1.0
    loss_and_grads(X, y, P)
