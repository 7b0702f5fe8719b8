"""All Numba code of attnsim: the model's forward pass, hand-derived gradients,
a many-step gradient-descent kernel and the population integrand.

Everything ``@njit`` lives in this one module: numba's on-disk cache does not
notice edits to helpers imported from other files (it would run stale code).
Public functions at the bottom validate and coerce input; the ``_kernels`` do
the work on contiguous float64 arrays and write into ``out`` arrays.

Model and loss
--------------
Tokens of sample i are the rows x_it (t = 1..T) of ``X2[i*T:(i+1)*T]`` (k wide).
With W (k x r), p (r), nu (k)::

    q = W p,   z_it = x_it . q,   s_i = softmax(z_i),   u_it = x_it . nu,
    f_i = sum_t s_it u_it,        L = (1/n) sum_i l(y_i f_i),

l(m) = log(1 + e^{-m}) (logistic) or l(m) = -m (linear).

Gradient derivation
-------------------
Write a_i = dL/df_i = (1/n) l'(y_i f_i) y_i, i.e. a_i = -(y_i/n) sigma(-y_i f_i)
for the logistic loss and a_i = -y_i/n for the linear one.

Softmax Jacobian: ds_it/dz_iv = s_it (delta_tv - s_iv), hence
df_i/dz_iv = sum_t u_it s_it (delta_tv - s_iv) = s_iv (u_iv - f_i).

Define c_iv = a_i s_iv (u_iv - f_i) = dL/dz_iv.  Since z_iv = x_iv^T W p,

    dL/dq   = sum_{i,v} c_iv x_iv =: g            (k,)
    dL/dW   = g p^T      (dz/dW_ab = x_a p_b)     (k, r)
    dL/dp   = W^T g      (dz/dp = W^T x)          (r,)
    dL/dnu  = sum_{i,t} a_i s_it x_it             (u_it = x_it . nu enters f linearly)

The same formulas hold for a rectangular W, which the reduced engine uses.

Reproducibility
---------------
No reduction runs across ``prange`` iterations: the parallel W pass splits the
rows into ``N_CHUNKS`` fixed chunks, each chunk writes its own buffer row, and a
serial loop adds the rows in order, so results do not depend on the number of
threads. Matrix-vector products go through BLAS (``np.dot``); pin BLAS threads
(threadpoolctl) for bitwise equality across thread settings (SPEC §10).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit, prange

CACHE = True
FASTMATH = False  # kept off: results must not depend on reassociation
N_CHUNKS = 16  # fixed row chunks of the parallel W pass (independent of threads)
PAR_MIN = 1 << 18  # W sizes (k * r) from which the W pass runs in parallel

TAYLOR_SD = 0.05  # conditional sd up to which the expected loss uses a Taylor series
HERMITE_SD = 0.3  # ... then Gauss-Hermite up to this sd (checked: 9e-11 relative), then a closed-form series
N_CVZ = 14  # terms of the accelerated series (error below 4 * 5.83^-14 = 7e-11 relative)

LOGISTIC, LINEAR = 0, 1
OK, DIVERGED, FROZEN = 0, 1, 2
_SQRT2 = math.sqrt(2.0)
_SQRTPI = math.sqrt(math.pi)
_SQRTPI_2 = math.sqrt(math.pi / 2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(cache=CACHE, fastmath=FASTMATH)
def _softplus(x):
    """log(1 + e^x) without overflow."""
    if x > 0.0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


@njit(cache=CACHE, fastmath=FASTMATH)
def _sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@njit(cache=CACHE, fastmath=FASTMATH)
def _loss_of_margin(m, loss_kind):
    if loss_kind == LINEAR:
        return -m
    return _softplus(-m)


@njit(cache=CACHE, fastmath=FASTMATH)
def _outputs(z, u, y, T, loss_kind, s, f):
    """Stable softmax of logits z (n*T,), outputs f (n,); returns the mean loss."""
    n = f.size
    total = 0.0
    for i in range(n):
        base = i * T
        zmax = z[base]
        for t in range(1, T):
            if z[base + t] > zmax:
                zmax = z[base + t]
        ssum = 0.0
        for t in range(T):
            e = math.exp(z[base + t] - zmax)
            s[base + t] = e
            ssum += e
        fi = 0.0
        for t in range(T):
            s[base + t] /= ssum
            fi += s[base + t] * u[base + t]
        f[i] = fi
        total += _loss_of_margin(y[i] * fi, loss_kind)
    return total / n


@njit(cache=CACHE, fastmath=FASTMATH)
def _token_coeffs(y, s, u, f, T, loss_kind, c, w):
    """c_it = a_i s_it (u_it - f_i) = dL/dz_it and w_it = a_i s_it (see docstring)."""
    n = f.size
    for i in range(n):
        if loss_kind == LINEAR:
            a = -y[i] / n
        else:
            a = -(y[i] / n) * _sigmoid(-y[i] * f[i])
        base = i * T
        for t in range(T):
            w[base + t] = a * s[base + t]
            c[base + t] = w[base + t] * (u[base + t] - f[i])


@njit(cache=CACHE, fastmath=FASTMATH, parallel=True)
def _w_pass_parallel(W, g, p, lr, part):
    """Chunk c: part[c] = W[rows_c]^T g[rows_c]; then W[rows_c] -= lr g p^T."""
    k, r = W.shape
    nc = part.shape[0]
    for c in prange(nc):
        lo = c * k // nc
        hi = (c + 1) * k // nc
        for j in range(r):
            part[c, j] = 0.0
        for i in range(lo, hi):
            gi = g[i]
            step = lr * gi
            for j in range(r):
                part[c, j] += W[i, j] * gi
                W[i, j] -= step * p[j]


@njit(cache=CACHE, fastmath=FASTMATH)
def _w_pass(W, g, p, lr, gp, part):
    """gp = W^T g with the old W, then W -= lr g p^T: one pass over W."""
    k, r = W.shape
    for j in range(r):
        gp[j] = 0.0
    if k * r >= PAR_MIN:
        _w_pass_parallel(W, g, p, lr, part)
        for c in range(part.shape[0]):  # serial, fixed-order reduction
            for j in range(r):
                gp[j] += part[c, j]
        return
    for i in range(k):
        gi = g[i]
        step = lr * gi
        for j in range(r):
            gp[j] += W[i, j] * gi
            W[i, j] -= step * p[j]


@njit(cache=CACHE, fastmath=FASTMATH)
def _sumsq(a):
    acc = 0.0
    for v in a:
        acc += v * v
    return acc


@njit(cache=CACHE, fastmath=FASTMATH)
def _all_zero(a):
    for v in a:
        if v != 0.0:
            return False
    return True


@njit(cache=CACHE, fastmath=FASTMATH)
def _gd_segment(
    X2, y, W, p, nu, u, lr, step0, nsteps, T, loss_kind, train_W, train_p, train_nu,
    rel, fit_since, S_acc, q, z, s, f, c, w, g, gnu, gp, part,
):  # fmt: skip
    """Apply ``nsteps`` GD updates in place, keeping the in-loop records.

    At each state tau (tau = step0 .. step0 + nsteps - 1, before update tau + 1):
    ``fit_since[i]`` is the first step of the current run of states in which
    y_i f_i > 0 (-1 while unfitted) and ``S_acc[i]`` accumulates
    s_rel (1 - s_rel), s_rel the score mass on sample i's relevant tokens
    (``rel`` is the (n*T,) relevant-token indicator).

    Returns (status, step): (OK, step0 + nsteps), (DIVERGED, tau) when the loss,
    |p|^2 or |W p|^2 at state tau is not finite, or (FROZEN, tau) when every gradient at state
    tau is exactly zero (the state is then a fixed point of GD in float64).
    """
    n = y.size
    for k in range(nsteps):
        step = step0 + k
        np.dot(W, p, q)
        if not (math.isfinite(_sumsq(q)) and math.isfinite(_sumsq(p))):
            return DIVERGED, step  # |q|^2 or |p|^2 overflows: the metrics would be meaningless
        if train_nu:
            np.dot(X2, nu, u)
        np.dot(X2, q, z)
        L = _outputs(z, u, y, T, loss_kind, s, f)
        if not math.isfinite(L):
            return DIVERGED, step
        for i in range(n):
            if y[i] * f[i] > 0.0:
                if fit_since[i] < 0:
                    fit_since[i] = step
            else:
                fit_since[i] = -1
            sr = 0.0
            for t in range(T):
                sr += rel[i * T + t] * s[i * T + t]
            S_acc[i] += sr * (1.0 - sr)
        _token_coeffs(y, s, u, f, T, loss_kind, c, w)
        np.dot(c, X2, g)
        if train_nu:
            np.dot(w, X2, gnu)
        if _all_zero(g) and (not train_nu or _all_zero(gnu)):
            return FROZEN, step
        if train_W:
            _w_pass(W, g, p, lr, gp, part)
        elif train_p:
            np.dot(g, W, gp)
        if train_p:
            for j in range(p.size):
                p[j] -= lr * gp[j]
        if train_nu:
            for j in range(nu.size):
                nu[j] -= lr * gnu[j]
    return OK, step0 + nsteps


@njit(cache=CACHE, fastmath=FASTMATH)
def _flow_rhs(
    theta, X2, y, W_fix, p_fix, nu_fix, T, loss_kind, train_W, train_p, train_nu, rel, lr,
    q, z, u, s, f, c, w, g, out,
):  # fmt: skip
    """Gradient-flow vector field -grad L at the state packed in ``theta``.

    Layout of theta and out: [W (k*r) if trained, p (r) if trained, nu (k) if
    trained, S (n)], with dS_i/dt = s_rel,i (1 - s_rel,i) / lr so that S
    counts in units of GD steps (t = lr * step). Untrained blocks come from
    the ``*_fix`` arrays. Returns the loss (NaN flags divergence).
    """
    k, r = W_fix.shape
    n = y.size
    o = 0
    W = W_fix
    if train_W:
        W = theta[: k * r].reshape(k, r)
        o = k * r
    p = p_fix
    if train_p:
        p = theta[o : o + r]
        o += r
    nu = nu_fix
    if train_nu:
        nu = theta[o : o + k]
        o += k
    np.dot(W, p, q)
    np.dot(X2, q, z)
    np.dot(X2, nu, u)
    L = _outputs(z, u, y, T, loss_kind, s, f)
    _token_coeffs(y, s, u, f, T, loss_kind, c, w)
    np.dot(c, X2, g)
    j = 0
    if train_W:
        for a in range(k):
            for b in range(r):
                out[j] = -g[a] * p[b]
                j += 1
    if train_p:
        gp = np.dot(g, W)
        for b in range(r):
            out[j] = -gp[b]
            j += 1
    if train_nu:
        gnu = np.dot(w, X2)
        for a in range(k):
            out[j] = -gnu[a]
            j += 1
    for i in range(n):
        sr = 0.0
        for t in range(T):
            sr += rel[i * T + t] * s[i * T + t]
        out[j + i] = sr * (1.0 - sr) / lr
    return L


@njit(cache=CACHE, fastmath=FASTMATH)
def _hermite_nodes(sd, n_max):
    """Gauss-Hermite nodes needed for E softplus(m + sd Z) to ~1e-10 relative
    when sd <= HERMITE_SD.

    softplus is analytic in a strip of half-width pi, so the n-node rule's error
    falls like (sd / pi)^(2n).
    """
    n = int(math.ceil(math.log(1e-11) / (2.0 * math.log(sd / math.pi)))) + 1
    return min(max(n, 2), n_max)


@njit(cache=CACHE, fastmath=FASTMATH)
def _erfcx(a):
    """Scaled complementary error function e^{a^2} erfc(a), for a >= 0 without
    overflow: directly below 6 (erfc keeps its relative accuracy there), else
    the asymptotic series 1/(a sqrt(pi)) sum_k (-1)^k (2k-1)!! / (2a^2)^k,
    summed while its terms shrink (error below e^{-36})."""
    if a < 6.0:
        return math.exp(a * a) * math.erfc(a)
    inv = 0.5 / (a * a)
    term = 1.0
    acc = 1.0
    for k in range(1, 40):
        nxt = -term * (2 * k - 1) * inv
        if abs(nxt) >= abs(term) or abs(nxt) < 1e-17:
            break
        term = nxt
        acc += term
    return acc / (a * _SQRTPI)


@njit(cache=CACHE, fastmath=FASTMATH)
def _exp_moment_above(x, sd, j):
    """E[e^{-jV}; V > 0] for V ~ N(x, sd^2) (j > 0), without overflow.

    It equals e^{-jx + j^2 sd^2 / 2} Phi((x - j sd^2) / sd). With
    b = (j sd^2 - x) / (sd sqrt 2) >= 0 the exponent and erfc(b) = erfcx(b) e^{-b^2}
    combine into e^{-x^2 / (2 sd^2)} erfcx(b) / 2; for b < 0 the exponent is
    negative and the direct form is safe.
    """
    b = (j * sd * sd - x) / (sd * _SQRT2)
    if b >= 0.0:
        t = x / sd
        return 0.5 * math.exp(-0.5 * t * t) * _erfcx(b)
    return 0.5 * math.exp(-j * x + 0.5 * j * j * sd * sd) * math.erfc(b)


@njit(cache=CACHE, fastmath=FASTMATH)
def _expected_softplus_series(x, sd):
    """E softplus(V), V ~ N(x, sd^2), to ~1e-12 relative for any sd > 0.

    softplus(v) = max(v, 0) + log(1 + e^{-|v|}). The first part has the closed
    form sd (t Phi(t) + phi(t)), t = x / sd (written as phi(u)(1 - u R(u)) with
    the Mills ratio R = sqrt(pi/2) erfcx(u / sqrt 2), u = -t, when t < 0, so no
    large terms cancel). The second is the alternating series
    sum_{j>=1} (-1)^{j+1} E[e^{-j|V|}] / j whose terms are moments of a positive
    measure on [0, 1] (e^{-j|v|}/j = int_{|v|}^inf e^{-js} ds), so the
    Cohen-Rodriguez Villegas-Zagier acceleration converges like 5.83^{-n}
    relative to the sum: ``N_CVZ`` terms, each two closed-form half moments.
    """
    t = x / sd
    if t >= 0.0:
        emax = x * 0.5 * math.erfc(-t / _SQRT2) + sd * math.exp(-0.5 * t * t) * _INV_SQRT2PI
    else:
        u = -t
        mills = _SQRTPI_2 * _erfcx(u / _SQRT2)
        emax = sd * math.exp(-0.5 * u * u) * _INV_SQRT2PI * (1.0 - u * mills)
    n = N_CVZ
    d = (3.0 + math.sqrt(8.0)) ** n
    d = 0.5 * (d + 1.0 / d)
    b = -1.0
    c = -d
    acc = 0.0
    for k in range(n):
        c = b - c
        j = k + 1.0
        acc += c * (_exp_moment_above(x, sd, j) + _exp_moment_above(-x, sd, j)) / j
        b = (k + n) * (k - n) * b / ((k + 0.5) * (k + 1.0))
    return emax + acc / d


@njit(cache=CACHE, fastmath=FASTMATH)
def _expected_softplus(x, sd, gh_x, gh_w, n_max):
    """E softplus(x + sd Z), Z ~ N(0, 1), to ~1e-9 relative for any sd >= 0.

    sd <= TAYLOR_SD: the fourth-order expansion
    sp(x) + sd^2 v / 2 + sd^4 v (1 - 6 v) / 8, with v = sigma(x) (1 - sigma(x))
    the second derivative of softplus and v (1 - 6 v) its fourth (within 3e-10
    relative, checked against a 120-node rule); sd <= HERMITE_SD: Gauss-Hermite
    with as many nodes as it needs; larger sd: the closed-form series of
    :func:`_expected_softplus_series` (a fixed rule would lose accuracy there:
    1e-3 relative at sd = 5 with 32 nodes).
    """
    if sd <= TAYLOR_SD:
        ex = math.exp(-abs(x))  # shared by softplus and the sigmoid
        sp = max(x, 0.0) + math.log1p(ex)
        v = ex / ((1.0 + ex) * (1.0 + ex))  # sigma(x) (1 - sigma(x))
        s2 = sd * sd
        return sp + 0.5 * s2 * v + 0.125 * s2 * s2 * v * (1.0 - 6.0 * v)
    if sd > HERMITE_SD:
        return _expected_softplus_series(x, sd)
    nh = _hermite_nodes(sd, n_max)
    acc = 0.0
    for h in range(nh):
        acc += gh_w[nh, h] * _softplus(x - _SQRT2 * sd * gh_x[nh, h])
    return acc


@njit(cache=CACHE, fastmath=FASTMATH, parallel=True)
def _population(zeta, aq, anu, sq, b, sdc, gh_x, gh_w, loss_kind, err, loss, score):
    """Population error and loss per scramble, and mean scores per token.

    For class c (y = +1, -1) and standard normal point zeta (T,):
    z_t = aq[c,t] + sq zeta_t, s = softmax(z), and f | z is Gaussian with mean
    sum_t s_t (anu[c,t] + b zeta_t) and sd sdc ||s||_2. The error is
    Phi(-y mean / sd); the loss is E softplus(-y f) (see _expected_softplus;
    ``gh_x[j, :j]``, ``gh_w[j, :j]`` is the j-node Gauss-Hermite rule).
    Both classes share each point's exponentials: e^{z_t} factors into
    e^{aq[c,t] - A_c} e^{sq zeta_t - B}; when that product underflows (sum
    below 1e-250) the softmax is recomputed directly. Scrambles run in
    parallel; each writes only its own rows of err, loss and score (R, T), so
    results do not depend on the thread count.
    """
    R, M, T = zeta.shape
    n_max = gh_x.shape[0] - 1
    wa = np.empty((2, T))
    for ci in range(2):
        amax = aq[ci, 0]
        for t in range(1, T):
            amax = max(amax, aq[ci, t])
        for t in range(T):
            wa[ci, t] = math.exp(aq[ci, t] - amax)
    for r in prange(R):
        s = np.empty(T)
        e = np.empty(T)
        e_acc = 0.0
        l_acc = 0.0
        for t in range(T):
            score[r, t] = 0.0
        for m in range(M):
            bmax = sq * zeta[r, m, 0]
            for t in range(1, T):
                bmax = max(bmax, sq * zeta[r, m, t])
            for t in range(T):
                e[t] = math.exp(sq * zeta[r, m, t] - bmax)
            for ci in range(2):
                yc = 1.0 if ci == 0 else -1.0
                ssum = 0.0
                for t in range(T):
                    s[t] = wa[ci, t] * e[t]
                    ssum += s[t]
                if not ssum > 1e-250:  # factored form underflowed: direct softmax
                    zmax = -math.inf
                    for t in range(T):
                        s[t] = aq[ci, t] + sq * zeta[r, m, t]
                        zmax = max(zmax, s[t])
                    ssum = 0.0
                    for t in range(T):
                        s[t] = math.exp(s[t] - zmax)
                        ssum += s[t]
                mean = 0.0
                s2 = 0.0
                for t in range(T):
                    st = s[t] / ssum
                    score[r, t] += st
                    mean += st * (anu[ci, t] + b * zeta[r, m, t])
                    s2 += st * st
                ym = yc * mean
                sd = sdc * math.sqrt(s2)
                if loss_kind == LINEAR:
                    l_acc -= ym
                if sd > 0.0:
                    e_acc += 0.5 * math.erfc(ym / (sd * _SQRT2))
                    if loss_kind == LOGISTIC:
                        l_acc += _expected_softplus(-ym, sd, gh_x, gh_w, n_max)
                else:
                    if ym < 0.0:
                        e_acc += 1.0
                    elif ym == 0.0:
                        e_acc += 0.5
                    if loss_kind == LOGISTIC:
                        l_acc += _softplus(-ym)
        err[r] = e_acc / (2 * M)
        loss[r] = l_acc / (2 * M)
        for t in range(T):
            score[r, t] /= 2 * M


# -- public wrappers ---------------------------------------------------------


def _f64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64)


def loss_kind_code(loss: str) -> int:
    return {"logistic": LOGISTIC, "linear": LINEAR}[loss]


def outputs(z, u, y, loss: str = "logistic"):
    """Scores s (n, T), outputs f (n,) and mean loss from logits z and values u (n, T)."""
    z, u, y = _f64(z), _f64(u), _f64(y)
    n, T = z.shape
    if u.shape != z.shape or y.shape != (n,):
        raise ValueError(f"shapes z {z.shape}, u {u.shape}, y {y.shape} do not match")
    s = np.empty(n * T)
    f = np.empty(n)
    L = _outputs(z.reshape(-1), u.reshape(-1), y, T, loss_kind_code(loss), s, f)
    return s.reshape(n, T), f, L


def loss_and_grads(X, y, W, p, nu, loss: str = "logistic"):
    """Mean loss and (grad_W, grad_p, grad_nu) by the kernels; X is (n, T, k)."""
    X, y, W, p, nu = map(_f64, (X, y, W, p, nu))
    n, T, k = X.shape
    if W.shape[0] != k or W.shape[1] != p.size or nu.size != k or y.size != n:
        raise ValueError(f"shapes X {X.shape}, W {W.shape}, p {p.shape}, nu {nu.shape} do not match")
    X2 = X.reshape(n * T, k)
    kind = loss_kind_code(loss)
    z, u = X2 @ (W @ p), X2 @ nu
    s, f = np.empty(n * T), np.empty(n)
    L = _outputs(z, u, y, T, kind, s, f)
    c, w = np.empty(n * T), np.empty(n * T)
    _token_coeffs(y, s, u, f, T, kind, c, w)
    g = c @ X2
    return L, np.outer(g, p), W.T @ g, w @ X2


class Segment:
    """Buffers and state for repeated :func:`_gd_segment` calls on one problem.

    The arrays W, p, nu are updated in place; ``fit_since`` and ``S_acc`` are
    the in-loop records (see the kernel's docstring).
    """

    def __init__(self, X2, y, W, p, nu, T, lr, train, loss, rel):
        self.X2, self.y = _f64(X2), _f64(y)
        self.W, self.p, self.nu = _f64(W).copy(), _f64(p).copy(), _f64(nu).copy()
        self.T, self.lr = int(T), float(lr)
        self.train = frozenset(train)
        self.kind = loss_kind_code(loss)
        self.rel = _f64(rel).reshape(-1)
        nT, k = self.X2.shape
        n = self.y.size
        r = self.p.size
        if self.W.shape != (k, r) or self.nu.size != k or nT != n * self.T or self.rel.size != nT:
            raise ValueError("Segment: inconsistent shapes")
        self.fit_since = -np.ones(n, dtype=np.int64)
        self.S_acc = np.zeros(n)
        self.u = self.X2 @ self.nu
        self.q, self.z, self.s = np.empty(k), np.empty(nT), np.empty(nT)
        self.f, self.c, self.w = np.empty(n), np.empty(nT), np.empty(nT)
        self.g, self.gnu, self.gp = np.empty(k), np.empty(k), np.empty(r)
        self.part = np.empty((N_CHUNKS, r))

    def advance(self, step0: int, nsteps: int) -> tuple[int, int]:
        """Apply ``nsteps`` updates starting at state ``step0``; (status, step)."""
        st, step = _gd_segment(
            self.X2, self.y, self.W, self.p, self.nu, self.u, self.lr, step0, nsteps,
            self.T, self.kind, "W" in self.train, "p" in self.train, "nu" in self.train,
            self.rel, self.fit_since, self.S_acc, self.q, self.z, self.s, self.f,
            self.c, self.w, self.g, self.gnu, self.gp, self.part,
        )  # fmt: skip
        return int(st), int(step)


class EvaluationBudgetExceeded(RuntimeError):
    """The flow solver evaluated the vector field more often than allowed."""


class FlowField:
    """The gradient-flow vector field of one problem, for scipy's solve_ivp.

    ``pack``/``unpack`` convert between (W, p, nu, S) and the flat state.
    At most ``max_evals`` evaluations per field (:class:`EvaluationBudgetExceeded`
    after that): when the logits are huge the adaptive step size can shrink to
    a tiny fraction of t and the solver would otherwise crawl for hours.
    """

    max_evals = 500_000  # legitimate flows to 1e14 steps need 5 000 - 15 000

    def __init__(self, X2, y, W, p, nu, T, lr, train, loss, rel):
        self.X2, self.y = _f64(X2), _f64(y)
        self.W, self.p, self.nu = _f64(W).copy(), _f64(p).copy(), _f64(nu).copy()
        self.T, self.lr = int(T), float(lr)
        self.flags = ("W" in train, "p" in train, "nu" in train)
        self.kind = loss_kind_code(loss)
        self.rel = _f64(rel).reshape(-1)
        nT, k = self.X2.shape
        n = self.y.size
        self.q, self.z, self.u, self.s = np.empty(k), np.empty(nT), np.empty(nT), np.empty(nT)
        self.f, self.c, self.w, self.g = np.empty(n), np.empty(nT), np.empty(nT), np.empty(k)
        self.last_loss = 0.0
        self.evals = 0

    def pack(self, W, p, nu, S) -> np.ndarray:
        tw, tp, tn = self.flags
        parts = ([W.ravel()] if tw else []) + ([p] if tp else []) + ([nu] if tn else []) + [S]
        return np.concatenate(parts)

    def unpack(self, theta: np.ndarray):
        """(W, p, nu, S) views/copies of a flat state."""
        k, r = self.W.shape
        tw, tp, tn = self.flags
        o = 0
        W = theta[: k * r].reshape(k, r) if tw else self.W
        o += k * r if tw else 0
        p = theta[o : o + r] if tp else self.p
        o += r if tp else 0
        nu = theta[o : o + k] if tn else self.nu
        o += k if tn else 0
        return W, p, nu, theta[o:]

    def __call__(self, t: float, theta: np.ndarray) -> np.ndarray:
        self.evals += 1
        if self.evals > self.max_evals:
            raise EvaluationBudgetExceeded(t)
        out = np.empty_like(theta)
        self.last_loss = _flow_rhs(
            np.ascontiguousarray(theta), self.X2, self.y, self.W, self.p, self.nu, self.T, self.kind,
            *self.flags, self.rel, self.lr, self.q, self.z, self.u, self.s, self.f, self.c, self.w,
            self.g, out,
        )  # fmt: skip
        return out


@functools.lru_cache(maxsize=4)
def hermite_table(n_max: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Hermite rules 1..n_max: row j holds the j-node rule (weights / sqrt(pi))."""
    x = np.zeros((n_max + 1, n_max))
    w = np.zeros((n_max + 1, n_max))
    for j in range(1, n_max + 1):
        xj, wj = np.polynomial.hermite.hermgauss(j)
        x[j, :j], w[j, :j] = xj, wj / np.sqrt(np.pi)
    return x, w


def population_eval(zeta, aq, anu, sq, b, sdc, gh_x, gh_w, loss: str = "logistic"):
    """Run :func:`_population`; returns (err (R,), loss (R,), score (T,)) where
    score is the mean over scrambles, reduced serially in fixed order."""
    R, M, T = zeta.shape
    err, lo, score = np.empty(R), np.empty(R), np.empty((R, T))
    _population(
        zeta, _f64(aq), _f64(anu), float(sq), float(b), float(sdc), gh_x, gh_w,
        loss_kind_code(loss), err, lo, score,
    )  # fmt: skip
    return err, lo, score.mean(axis=0)


def warmup() -> None:
    """Compile (or load from cache) every kernel on a tiny problem."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2, 3, 4))
    y = np.array([1.0, -1.0])
    W, p, nu = rng.standard_normal((4, 4)), rng.standard_normal(4), rng.standard_normal(4)
    loss_and_grads(X, y, W, p, nu)
    seg = Segment(X.reshape(6, 4), y, W, p, nu, 3, 1e-3, ("W", "p", "nu"), "logistic", np.ones(6))
    seg.advance(0, 1)
    field = FlowField(X.reshape(6, 4), y, W, p, nu, 3, 1e-3, ("W", "p", "nu"), "logistic", np.ones(6))
    field(0.0, field.pack(W, p, nu, np.zeros(2)))
    z = np.zeros((1, 2, 3))
    gx, gw = hermite_table(3)
    population_eval(z, np.zeros((2, 3)), np.zeros((2, 3)), 0.0, 0.0, 1.0, gx, gw)
