"""The one-layer Transformer encoder's forward and backward passes (SPEC §12): the
CLS path only, with hand-derived gradients; BLAS-3 shaped products
(:mod:`.linalg`) and, between them, one Numba kernel per stretch of per-row work
(:mod:`.kernels`).

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
"""

from __future__ import annotations

import math

import numpy as np

from .kernels import (
    _attend,
    _attend_back,
    _bias_gelu,
    _gelu_back,
    _head_back,
    _ln2_back,
    _ln_rows,
    _output,
    _residual_ln,
    _ubar_sums,
    layer_norm_back,
    normalized_tokens,
)
from .linalg import Held, NoneHeld, Outer, dense_grads, dot, mm, mm_t, rows_dot
from .params import param_shapes


def work_arrays(n: int, T: int, d: int, m: int) -> dict[str, np.ndarray]:
    """The arrays a forward and backward pass of ``n`` samples fill (:func:`forward`'s cache and
    :func:`backward`'s gradients): a stepper keeps one set, so no step maps fresh memory (a
    20 x 2000 array is above malloc's mmap threshold, and its page faults cost every step)."""
    rows = {"nbar": d, "ubar": d, "o": d, "h": d, "h2": d, "n2": d, "z": d, "zf": d, "nf": d}
    rows |= {"r": m, "gr": m, "dgr": m, "mlp": d, "dz": d, "dh2": d, "dh": d, "dubar": d}
    out = {k: np.empty((n, w)) for k, w in rows.items()}
    out |= {k: np.empty((n, T + 1)) for k in ("logits", "a", "dl")}
    out |= {k: np.empty(n) for k in ("asum", "r2", "rf", "f")}
    out |= {k: np.empty((1, d)) for k in ("uc", "nc")}
    out["rc"] = np.empty(1)
    vectors = ("lnf_g", "lnf_b", "b2", "b1", "ln2_g", "ln2_b", "dc", "m_dl", "v", "s_nbar", "s_asum", "s_cls")
    out |= {f"g_{k}": np.empty(d) for k in vectors}
    out["g_b1"] = np.empty(m)
    out["g_head_w"] = np.empty((1, d))
    return out


def forward(
    X2: np.ndarray,
    n: int,
    T: int,
    P: dict,
    skip: bool,
    nx: np.ndarray | None = None,
    held: Held | None = None,
    work: dict | None = None,
) -> dict:
    """The CLS path of the encoder for tokens X2 (n*T, d) (``nx``: their
    :func:`normalized_tokens`, computed here if not given; ``held``: updates of
    W_q and W_k not yet in P, :class:`Held`; ``work``: :func:`work_arrays` to fill, the
    next call's to overwrite); returns every intermediate the backward pass needs
    (f: (n,) outputs, a: (n, T+1) attention of the CLS query, column 0 on the CLS
    token itself). The data tokens enter through nhat only: with u_t = g * nhat_t + b,
    kappa . u_t = (kappa * g) . nhat_t + kappa . b and
    sum_t a_t u_t = g * (sum_t a_t nhat_t) + b sum_t a_t. Between the BLAS products,
    each stretch of per-row work is one kernel."""
    d = X2.shape[1]
    w = work_arrays(n, T, d, P["b1"].size) if work is None else work
    nx = normalized_tokens(X2) if nx is None else nx
    c = P["cls"].reshape(d)
    g1, b1n = P["ln1_g"], P["ln1_b"]
    _ln_rows(c[None, :], g1, b1n, w["nc"], w["rc"], w["uc"])
    uc = w["uc"][0]
    Wqkv = P["W_qkv"]
    Wq, Wk, Wv = Wqkv[:d], Wqkv[d : 2 * d], Wqkv[2 * d :]
    W = NoneHeld if held is None else held
    q = W.mv(0, Wq, uc)
    kappa = W.mtv(1, Wk, q)
    s = 1.0 / math.sqrt(d)
    lc, kb = dot(uc, kappa) * s, dot(kappa, b1n) * s  # the CLS token's logit; kappa . b for every token
    a, ubar = w["a"], w["ubar"]
    _attend(nx, kappa * g1 * s, kb, lc, uc, g1, b1n, T, w["logits"], a, w["nbar"], ubar, w["asum"])
    _residual_ln(mm_t(ubar, Wv, w["o"]), c, skip, P["ln2_g"], P["ln2_b"], w["h"], w["n2"], w["r2"], w["h2"])
    _bias_gelu(mm_t(w["h2"], P["W1"], w["r"]), P["b1"], w["gr"], w["dgr"])
    mlp = mm_t(w["gr"], P["W2"], w["mlp"])
    _output(mlp, P["b2"], w["h"], skip, P["lnf_g"], P["lnf_b"], w["z"], w["nf"], w["rf"], w["zf"])
    w["f"][:] = rows_dot(w["zf"], P["head_w"].reshape(d)) + P["head_b"].reshape(())
    return {**w, "nx": nx, "q": q, "kappa": kappa}


def backward(
    X2: np.ndarray,
    n: int,
    T: int,
    P: dict,
    skip: bool,
    cache: dict,
    df: np.ndarray,
    lr: float | None = None,
    held: Held | None = None,
) -> dict:
    """Gradients of sum_i df_i f_i with respect to every parameter (the
    derivation is in the module docstring): arrays in the parameters' shapes,
    the weight matrices as :class:`Outer` factors (W_qkv as its three row
    blocks; :func:`dense_grads` makes arrays of them). With ``lr`` it also
    takes the gradient step in place: W2, W1 and W_v each right after the
    product that last reads it (what of it is still in cache is not read
    again), W_q and W_k through ``held`` when given. The token gradients
    delta_u_t = a_t delta_ubar + s delta_l_t kappa are never formed: LN1's
    gain and bias need only their sums against nhat_t and 1. The gradient arrays
    are ``cache``'s (:func:`work_arrays`): the next pass overwrites them."""
    w = cache
    d = X2.shape[1]
    s = 1.0 / math.sqrt(d)
    Wqkv = P["W_qkv"]
    Wq, Wk, Wv = Wqkv[:d], Wqkv[d : 2 * d], Wqkv[2 * d :]
    G = {}
    dz = w["dz"]
    _head_back(df, w["zf"], P["head_w"].reshape(d), P["lnf_g"], w["nf"], w["rf"], w["g_head_w"].reshape(d),
               w["g_lnf_g"], w["g_lnf_b"], dz, w["g_b2"])  # fmt: skip
    G["head_w"], G["head_b"] = w["g_head_w"], np.array([df.sum()])
    G["lnf_g"], G["lnf_b"], G["b2"] = w["g_lnf_g"], w["g_lnf_b"], w["g_b2"]
    G["W2"] = Outer(dz, w["gr"])
    dr = mm(dz, P["W2"], w["r"])  # r is not needed after the forward pass: its array takes dr
    _gelu_back(dr, w["dgr"], w["g_b1"])
    now = lr is not None
    if now:
        G["W2"].subtract_from(P["W2"], lr)
    G["W1"], G["b1"] = Outer(dr, w["h2"]), w["g_b1"]
    dh2 = mm(dr, P["W1"], w["dh2"])
    if now:
        G["W1"].subtract_from(P["W1"], lr)
    dh = w["dh"]
    _ln2_back(dh2, P["ln2_g"], w["n2"], w["r2"], dz, skip, w["g_ln2_g"], w["g_ln2_b"], dh, w["g_dc"])
    G["ln2_g"], G["ln2_b"] = w["g_ln2_g"], w["g_ln2_b"]
    G_Wv = Outer(dh, w["ubar"])
    dubar = mm(dh, Wv, w["dubar"])
    if now:
        G_Wv.subtract_from(Wv, lr)
    g1, b1n = P["ln1_g"], P["ln1_b"]
    a, uc = w["a"], w["uc"][0]
    dl, m_dl = w["dl"], w["g_m_dl"]  # delta_l; sum_(i,t) delta_l_t nhat_t
    _attend_back(w["nx"], a, dubar, uc, g1, b1n, T, dl, m_dl, w["g_v"])
    s_nbar, s_asum, s_cls = w["g_s_nbar"], w["g_s_asum"], w["g_s_cls"]
    _ubar_sums(dubar, w["nbar"], w["asum"], a, s_nbar, s_asum, s_cls)
    kappa = w["kappa"]
    dl_x, dl_c = float(dl[:, 1:].sum()), float(dl[:, 0].sum())
    dkappa = s * (dl_c * uc + m_dl * g1 + dl_x * b1n)
    duc = s_cls + s * dl_c * kappa
    q = w["q"]
    W = NoneHeld if held is None else held
    dq = W.mv(1, Wk, dkappa)
    G_Wk = Outer(q[None, :], dkappa[None, :])
    G_Wq = Outer(dq[None, :], uc[None, :])
    duc = duc + W.mtv(0, Wq, dq)
    G["ln1_g"] = s_nbar + s * kappa * m_dl + duc * w["nc"][0]
    G["ln1_b"] = s_asum + s * dl_x * kappa + duc
    dc = (w["g_dc"] if skip else np.zeros(d)) + layer_norm_back(duc[None, :], g1, w["nc"], w["rc"])[0]
    G["cls"] = dc.reshape(1, 1, d)
    G["W_qkv"] = [G_Wq, G_Wk, G_Wv]
    if now:
        if held is not None:
            held.add(Wqkv, lr, G_Wq, G_Wk)
        else:
            G_Wq.subtract_from(Wq, lr)
            G_Wk.subtract_from(Wk, lr)
        for k, g in G.items():
            if not isinstance(g, (Outer, list)):
                P[k] -= lr * g
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
