"""Numba kernels of the one-layer Transformer encoder's CLS path (SPEC §12): the
per-row and per-token passes between its BLAS products (LayerNorms, the CLS
query's attention, GELU, and their backward passes with the sums over samples
the gradients need), and thin wrappers that allocate their outputs. The passes
that call them, with the model and the gradient derivation, are in :mod:`.passes`.

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
        for j in range(d):
            g_w[j] += a * zf[i, j]
        m1, m2 = _ln_back_sums(a, w, g, nhat[i], g_g, g_b)
        r = rstd[i]
        for j in range(d):
            v = r * (a * w[j] * g[j] - m1 - nhat[i, j] * m2)
            dz[i, j] = v
            g_b2[j] += v


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL, inline="always")
def _ln_back_sums(a, dy, g, nhat, g_g, g_b):
    """One row of a LayerNorm's backward with output gradient a * dy: its gain and bias
    gradients added to g_g and g_b, and the two means its input gradient needs,
    mean(a dy g) and mean(a dy g nhat)."""
    d = dy.size
    m1 = 0.0
    m2 = 0.0
    for j in range(d):
        v = a * dy[j]
        g_g[j] += v * nhat[j]
        g_b[j] += v
        gh = v * g[j]
        m1 += gh
        m2 += gh * nhat[j]
    return m1 / d, m2 / d


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
        m1, m2 = _ln_back_sums(1.0, dh2[i], g, nhat[i], g_g, g_b)  # a * dy exact with a = 1
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
