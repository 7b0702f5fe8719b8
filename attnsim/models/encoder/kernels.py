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

import numpy as np
from numba import njit

from ...runtime import numba_cache  # noqa: F401  (before any kernel loads)
from ...runtime.numba_cache import CACHE, ERROR_MODEL, FASTMATH
from .linalg import Held, NoneHeld, Outer, dense_grads, dot, mm, mm_t, rows_dot
from .params import param_shapes

LN_EPS = 1e-5
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
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


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _dot8(x, y):
    """x . y in eight interleaved partial sums (each summed in order, so the
    compiler may pack them into one vector register without reassociating)."""
    m = x.size
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    j = 0
    while j + 8 <= m:
        s0 += x[j] * y[j]
        s1 += x[j + 1] * y[j + 1]
        s2 += x[j + 2] * y[j + 2]
        s3 += x[j + 3] * y[j + 3]
        s4 += x[j + 4] * y[j + 4]
        s5 += x[j + 5] * y[j + 5]
        s6 += x[j + 6] * y[j + 6]
        s7 += x[j + 7] * y[j + 7]
        j += 8
    tail = 0.0
    while j < m:
        tail += x[j] * y[j]
        j += 1
    return ((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7)) + tail


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _attend(nx, kg, kb, lc, uc, g, b, T, logits, a, nbar, ubar, asum):
    """The CLS query's attention, sample by sample, from the normalized tokens
    nx (n*T, d): logits (CLS first: lc; token t: nhat_t . kg + kb), their
    softmax a, asum = sum_t a_t over the data tokens, nbar = sum_t a_t nhat_t and
    ubar = a_c uc + g * nbar + b asum."""
    n, d = nbar.shape
    for i in range(n):
        logits[i, 0] = lc
        top = lc
        for t in range(T):
            v = _dot8(nx[i * T + t], kg) + kb
            logits[i, t + 1] = v
            top = max(top, v)
        total = 0.0
        for t in range(T + 1):
            a[i, t] = math.exp(logits[i, t] - top)
            total += a[i, t]
        rest = 0.0
        for t in range(T + 1):
            a[i, t] /= total
            rest += a[i, t] if t > 0 else 0.0
        asum[i] = rest
        for j in range(d):
            nbar[i, j] = 0.0
        for t in range(T):
            w = a[i, t + 1]
            row = nx[i * T + t]
            for j in range(d):
                nbar[i, j] += w * row[j]
        ac = a[i, 0]
        for j in range(d):
            ubar[i, j] = ac * uc[j] + g[j] * nbar[i, j] + b[j] * rest


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _attend_back(nx, a, dubar, uc, g, b, T, dl, m_dl, v):
    """Back through the attention: da_t = u_t . delta_ubar (u_t = g * nhat_t + b,
    the CLS token's u_c), dl = a (da - sum_s a_s da_s), and m_dl = sum_(i,t)
    dl_t nhat_t; v is a d-long work array."""
    n, d = dubar.shape
    for j in range(d):
        m_dl[j] = 0.0
    for i in range(n):
        cb = 0.0
        for j in range(d):
            v[j] = g[j] * dubar[i, j]
            cb += b[j] * dubar[i, j]
        dl[i, 0] = _dot8(uc, dubar[i])
        for t in range(T):
            dl[i, t + 1] = _dot8(nx[i * T + t], v) + cb
        mean = 0.0
        for t in range(T + 1):
            mean += a[i, t] * dl[i, t]
        for t in range(T + 1):
            dl[i, t] = a[i, t] * (dl[i, t] - mean)
        for t in range(T):
            w = dl[i, t + 1]
            row = nx[i * T + t]
            for j in range(d):
                m_dl[j] += w * row[j]


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _residual_ln(o, c, skip, g, b, h, nhat, rstd, out):
    """h = o + c (``skip``; else o), then its LayerNorm (:func:`_ln_rows`) into nhat, rstd, out."""
    rows, d = o.shape
    for i in range(rows):
        for j in range(d):
            h[i, j] = o[i, j] + c[j] if skip else o[i, j]
    _ln_rows(h, g, b, nhat, rstd, out)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _bias_gelu(r, b, g, dg):
    """r += b (the MLP's first bias), then g = gelu(r) and dg = gelu'(r) (:func:`_gelu_pair`)."""
    rows, m = r.shape
    for i in range(rows):
        for j in range(m):
            r[i, j] += b[j]
    _gelu_pair(r, g, dg)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _output(mlp, b2, h, skip, g, b, z, nhat, rstd, zf):
    """z = h + (mlp + b2) (``skip``; else mlp + b2) and zf = LNf(z)."""
    rows, d = mlp.shape
    for i in range(rows):
        for j in range(d):
            v = mlp[i, j] + b2[j]
            z[i, j] = h[i, j] + v if skip else v
    _ln_rows(z, g, b, nhat, rstd, zf)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _head_back(df, zf, w, g, nhat, rstd, g_w, g_g, g_b, dz, g_b2):
    """Back from the outputs: the head's gradients (g_w = sum_i df_i zf_i), LNf's (g_g, g_b)
    of delta_zf = df_i w, its input gradient dz, and the second MLP bias's (g_b2 = sum_i dz_i)."""
    n, d = zf.shape
    for j in range(d):
        g_w[j] = 0.0
        g_g[j] = 0.0
        g_b[j] = 0.0
        g_b2[j] = 0.0
    for i in range(n):
        a = df[i]
        m1 = 0.0
        m2 = 0.0
        for j in range(d):
            g_w[j] += a * zf[i, j]
            dy = a * w[j]
            g_g[j] += dy * nhat[i, j]
            g_b[j] += dy
            gh = dy * g[j]
            m1 += gh
            m2 += gh * nhat[i, j]
        m1 /= d
        m2 /= d
        r = rstd[i]
        for j in range(d):
            v = r * (a * w[j] * g[j] - m1 - nhat[i, j] * m2)
            dz[i, j] = v
            g_b2[j] += v


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _gelu_back(dgr, deriv, g_b1):
    """dr = dgr * gelu'(r) in place, and the first MLP bias's gradient g_b1 = sum_i dr_i."""
    n, m = dgr.shape
    for j in range(m):
        g_b1[j] = 0.0
    for i in range(n):
        for j in range(m):
            v = dgr[i, j] * deriv[i, j]
            dgr[i, j] = v
            g_b1[j] += v


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _ln2_back(dh2, g, nhat, rstd, dz, skip, g_g, g_b, dh, dc):
    """Back through LN2: its gain and bias gradients, the input gradient dh (plus dz, the
    residual, with ``skip``) and the CLS token's share dc = sum_i dh_i (zero without it)."""
    n, d = dh2.shape
    for j in range(d):
        g_g[j] = 0.0
        g_b[j] = 0.0
        dc[j] = 0.0
    for i in range(n):
        m1 = 0.0
        m2 = 0.0
        for j in range(d):
            dy = dh2[i, j]
            g_g[j] += dy * nhat[i, j]
            g_b[j] += dy
            gh = dy * g[j]
            m1 += gh
            m2 += gh * nhat[i, j]
        m1 /= d
        m2 /= d
        r = rstd[i]
        for j in range(d):
            v = r * (dh2[i, j] * g[j] - m1 - nhat[i, j] * m2)
            if skip:
                v += dz[i, j]
                dc[j] += v
            dh[i, j] = v


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _ubar_sums(dubar, nbar, asum, a, s_nbar, s_asum, s_cls):
    """The sums over samples LN1's gradients need: sum_i dubar_i * nbar_i, sum_i asum_i dubar_i
    and sum_i a_(i,CLS) dubar_i."""
    n, d = dubar.shape
    for j in range(d):
        s_nbar[j] = 0.0
        s_asum[j] = 0.0
        s_cls[j] = 0.0
    for i in range(n):
        w1, w2 = asum[i], a[i, 0]
        for j in range(d):
            v = dubar[i, j]
            s_nbar[j] += v * nbar[i, j]
            s_asum[j] += w1 * v
            s_cls[j] += w2 * v


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(out, nhat, rstd) of the LayerNorm of the rows of a 2-d array."""
    nhat, out, rstd = np.empty_like(x), np.empty_like(x), np.empty(x.shape[0])
    _ln_rows(x, g, b, nhat, rstd, out)
    return out, nhat, rstd


def layer_norm_back(dy: np.ndarray, g: np.ndarray, nhat: np.ndarray, rstd: np.ndarray) -> np.ndarray:
    dx = np.empty_like(dy)
    _ln_back_rows(dy, g, nhat, rstd, dx)
    return dx


def normalized_tokens(X2: np.ndarray) -> np.ndarray:
    """The data tokens (n*T, d) normalized without gain or bias: LN1 of token t
    is g * nhat_t + b, and nhat_t depends on the data only, so a stepper
    computes it once and no step forms a token-sized array."""
    d = X2.shape[1]
    _, nhat, _ = layer_norm(X2, np.ones(d), np.zeros(d))
    return nhat


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _gelu_pair(r, g, dg):
    """g = r Phi(r) and dg = Phi(r) + r phi(r) in one pass (Phi by erfc, accurate in both tails)."""
    flat, gf, df = r.ravel(), g.ravel(), dg.ravel()
    for i in range(flat.size):
        x = flat[i]
        cdf = 0.5 * math.erfc(-x * _INV_SQRT2)
        gf[i] = x * cdf
        df[i] = cdf + x * math.exp(-0.5 * x * x) * _INV_SQRT2PI


def gelu(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact GELU r Phi(r) and its derivative Phi(r) + r phi(r)."""
    g, dg = np.empty_like(r), np.empty_like(r)
    _gelu_pair(r, g, dg)
    return g, dg


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
