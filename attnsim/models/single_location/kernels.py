"""Numba kernels of single-location regression (SPEC §20): the population risk of the erf
predictor and its five partial derivatives, projected GD on it in the five overlaps (many steps
per call), and the mean squared loss with its gradient on samples (erf, softmax or linear
attention) in one pass over the (n, L, d) tokens.

The closed form is :mod:`.reference`'s (derived there), written out for Numba: zeta needs Owen's
T function, T(h, a) = (1/2 pi) int_0^a exp(-h^2 (1 + x^2) / 2) / (1 + x^2) dx for 0 < a <= 1,
computed here by 64-point Gauss-Legendre on [0, min(a, 13/|h|)] (beyond 13/|h| the integrand is
below exp(-84) of its value at 0): within 2e-16 of SciPy's owens_t on the whole (h, a) plane the
runs reach (tests/test_single_location.py).

Every ``@njit`` function here calls only functions of this file; they run on one thread (the
sample kernel sums the samples' gradients in their order: the same bits at any thread count).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ...runtime import numba_cache  # noqa: F401  (before any kernel loads)
from ...runtime.numba_cache import CACHE, ERROR_MODEL, FASTMATH

_GL_X, _GL_W = np.polynomial.legendre.leggauss(64)  # nodes and weights on [-1, 1]
SQRT_PI = math.sqrt(math.pi)
ERF, SOFTMAX, LINEAR = 0, 1, 2  # the attentions' codes
ATTENTIONS = {"erf": ERF, "softmax": SOFTMAX, "linear": LINEAR}


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _owens_t(h, a, gx, gw):
    """Owen's T(h, a) for 0 < a <= 1 by Gauss-Legendre (nodes gx, weights gw on [-1, 1])."""
    h = abs(h)
    ub = a if h * a <= 13.0 else 13.0 / h
    half = 0.5 * ub
    total = 0.0
    for i in range(gx.size):
        x = half * (gx[i] + 1.0)
        total += gw[i] * math.exp(-0.5 * h * h * (1.0 + x * x)) / (1.0 + x * x)
    return total * half / (2.0 * math.pi)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _erf1(x):
    return 2.0 / SQRT_PI * math.exp(-x * x)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _zeta(t, s, gx, gw):
    """E[erf(t + s g)^2] = 1 - 8 T(sqrt 2 t / sqrt(1 + 2 s^2), 1 / sqrt(1 + 4 s^2))."""
    return 1.0 - 8.0 * _owens_t(
        math.sqrt(2.0) * t / math.sqrt(1.0 + 2.0 * s * s), 1.0 / math.sqrt(1.0 + 4.0 * s * s), gx, gw
    )


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _risk_and_partials(o, lam, gamma, d, L, eps, gx, gw, out):
    """The risk (returned) and its partials in (kappa, nu, theta, eta, rho) into ``out`` (5,)."""
    kappa, nu, theta, eta, rho = o[0], o[1], o[2], o[3], o[4]
    g2 = gamma * gamma
    s = lam * gamma
    D = 1.0 + 2.0 * s * s
    rD = math.sqrt(D)
    c = math.sqrt(D * (1.0 + 4.0 * s * s))
    h = math.sqrt(d / 2.0)
    u = lam * h * kappa
    w = u / rD
    q = u / c
    mB = h * theta
    # zeta and its t-derivatives at (u, s)
    z0 = _zeta(u, s, gx, gw)
    ew1, ew2 = _erf1(w), -2.0 * w * _erf1(w)
    ew3 = (4.0 * w * w - 2.0) * _erf1(w)
    eq0, eq1 = math.erf(q), _erf1(q)
    eq2 = -2.0 * q * eq1
    z1 = 2.0 / rD * ew1 * eq0
    z2 = 2.0 / rD * (ew2 / rD * eq0 + ew1 * eq1 / c)
    z3 = 2.0 / rD * (ew3 / D * eq0 + 2.0 * ew2 * eq1 / (rD * c) + ew1 * eq2 / (c * c))
    e0 = math.erf(w)
    C = 2.0 * lam / math.sqrt(math.pi * (1.0 + 2.0 * lam * lam))
    K = 8.0 * lam * lam / (math.pi * (1.0 + 2.0 * lam * lam) * math.sqrt(1.0 + 4.0 * lam * lam))
    znoise = _zeta(0.0, lam, gx, gw)
    Lm = L - 1.0
    Ef1 = mB * e0 + lam * g2 * rho * ew1 / rD
    Ef1sq = (mB * mB + g2) * z0 + 2.0 * mB * gamma * rho * s * z1 + g2 * rho * rho * s * s * z2
    Ef1y = g2 * nu * e0 + lam * g2 * mB * eta * ew1 / rD + lam * lam * g2 * g2 * eta * rho * ew2 / D
    R = Ef1sq + Lm * (znoise + K * rho * rho) + 2.0 * Lm * C * rho * Ef1 + Lm * (L - 2.0) * C * C * rho * rho
    R += -2.0 * Ef1y + g2 + eps * eps
    du, dw = lam * h, lam * h / rD
    Ef1sq_k = du * ((mB * mB + g2) * z1 + 2.0 * mB * gamma * rho * s * z2 + g2 * rho * rho * s * s * z3)
    Ef1_k = dw * (mB * ew1 + lam * g2 * rho * ew2 / rD)
    Ef1y_k = dw * (g2 * nu * ew1 + lam * g2 * mB * eta * ew2 / rD + lam * lam * g2 * g2 * eta * rho * ew3 / D)
    out[0] = Ef1sq_k + 2.0 * Lm * C * rho * Ef1_k - 2.0 * Ef1y_k
    out[1] = -2.0 * g2 * e0
    out[2] = h * (2.0 * mB * z0 + 2.0 * gamma * rho * s * z1) + 2.0 * Lm * C * rho * h * e0
    out[2] -= 2.0 * h * lam * g2 * eta * ew1 / rD
    out[3] = -2.0 * (lam * g2 * mB * ew1 / rD + lam * lam * g2 * g2 * rho * ew2 / D)
    out[4] = (
        2.0 * mB * gamma * s * z1
        + 2.0 * g2 * rho * s * s * z2
        + 2.0 * Lm * K * rho
        + 2.0 * Lm * C * (Ef1 + rho * lam * g2 * ew1 / rD)
        + 2.0 * Lm * (L - 2.0) * C * C * rho
        - 2.0 * lam * lam * g2 * g2 * eta * ew2 / D
    )
    return R


def risk_and_partials(o, lam, gamma, d, L, eps):
    """(risk, partials (5,)) at overlaps ``o`` (the wrapper: contiguous float64, the GL table)."""
    out = np.empty(5)
    R = _risk_and_partials(np.ascontiguousarray(o, dtype=np.float64), float(lam), float(gamma), float(d),
                           float(L), float(eps), _GL_X, _GL_W, out)  # fmt: skip
    return R, out


def zeta(t, s):
    """E[erf(t + s g)^2] as the kernels compute it."""
    return _zeta(float(t), float(s), _GL_X, _GL_W)


def owens_t(h, a):
    """Owen's T(h, a), 0 < a <= 1, as the kernels compute it."""
    return _owens_t(float(h), float(a), _GL_X, _GL_W)


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _overlaps(c, G, o):
    """The overlaps (kappa, nu, theta, eta, rho) of k = E c[0], v = E c[1] into ``o`` (G: E's Gram
    matrix, E = (k(0), v(0), k*, v*))."""
    k2 = 0.0
    v2 = 0.0
    kv = 0.0
    kks = 0.0
    kvs = 0.0
    vks = 0.0
    vvs = 0.0
    for i in range(4):
        gk = 0.0
        gv = 0.0
        for j in range(4):
            gk += G[i, j] * c[0, j]
            gv += G[i, j] * c[1, j]
        kv += c[0, i] * gv
        k2 += c[0, i] * gk
        v2 += c[1, i] * gv
        if i == 2:
            kks, vks = gk, gv
        elif i == 3:
            kvs, vvs = gk, gv
    o[0], o[1], o[2], o[3], o[4] = kks, vvs, vks, kvs, kv
    return k2, v2


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _pgd_coefficients(c, G, step0, nsteps, lr, lam0, schedule, gamma, d, L, gx, gw):
    """``nsteps`` projected GD steps on the population risk, k = E c[0] and v = E c[1] updated in
    place: grad_k R = R_kappa k* + R_eta v* + R_rho v, grad_v R = R_theta k* + R_nu v* + R_rho k,
    their tangent parts applied, k and v renormalized (norms from G); lambda_t = lam0 / (1 + 1e-4 t)
    with ``schedule`` (the authors' lambd_value, t the step's index from 0). Returns (0, step
    reached), or (1, step) when a norm is not finite."""
    P = np.empty(5)
    o = np.empty(5)
    nk = np.empty(4)
    nv = np.empty(4)
    for j in range(nsteps):
        t = step0 + j
        lam = lam0 / (1.0 + 1e-4 * t) if schedule else lam0
        _overlaps(c, G, o)
        _risk_and_partials(o, lam, gamma, d, L, 0.0, gx, gw, P)
        ck = P[0] * o[0] + P[3] * o[3] + P[4] * o[4]
        cv = P[2] * o[2] + P[1] * o[1] + P[4] * o[4]
        for i in range(4):
            nk[i] = (1.0 + lr * ck) * c[0, i] - lr * P[4] * c[1, i]
            nv[i] = (1.0 + lr * cv) * c[1, i] - lr * P[4] * c[0, i]
        nk[2] -= lr * P[0]
        nk[3] -= lr * P[3]
        nv[2] -= lr * P[2]
        nv[3] -= lr * P[1]
        a2 = 0.0
        b2 = 0.0
        for i in range(4):
            for m in range(4):
                a2 += nk[i] * G[i, m] * nk[m]
                b2 += nv[i] * G[i, m] * nv[m]
        if not (math.isfinite(a2) and math.isfinite(b2)) or a2 <= 0.0 or b2 <= 0.0:
            return 1, t
        ra = 1.0 / math.sqrt(a2)
        rb = 1.0 / math.sqrt(b2)
        for i in range(4):
            c[0, i] = nk[i] * ra
            c[1, i] = nv[i] * rb
    return 0, step0 + nsteps


def pgd_coefficients(c, G, step0, nsteps, lr, lam0, schedule, gamma, d, L):
    """The wrapper of :func:`_pgd_coefficients` (``c`` (2, 4) updated in place): (status, step reached)."""
    return _pgd_coefficients(c, G, int(step0), int(nsteps), float(lr), float(lam0), bool(schedule),
                             float(gamma), float(d), float(L), _GL_X, _GL_W)  # fmt: skip


def coefficient_overlaps(c, G) -> np.ndarray:
    """(kappa, nu, theta, eta, rho) of k = E c[0], v = E c[1] (G: E's Gram matrix)."""
    o = np.empty(5)
    _overlaps(c, G, o)
    return o


@njit(cache=CACHE, fastmath=FASTMATH, error_model=ERROR_MODEL)
def _loss_grad(X, y, k, v, lam, attention, gk, gv, A, B, phi, dA):
    """The mean squared loss (returned) and its gradient in k and v into gk, gv (d,): the sum over
    samples in their order, on one thread. A, B, phi, dA: (L,) scratch."""
    n, L, d = X.shape
    total = 0.0
    for j in range(d):
        gk[j] = 0.0
        gv[j] = 0.0
    for i in range(n):
        for m in range(L):
            x = X[i, m]
            sa = 0.0
            sb = 0.0
            for j in range(d):
                sa += x[j] * k[j]
                sb += x[j] * v[j]
            A[m] = lam * sa
            B[m] = sb
        if attention == 1:  # softmax over the tokens
            top = A[0]
            for m in range(1, L):
                top = max(top, A[m])
            z = 0.0
            for m in range(L):
                phi[m] = math.exp(A[m] - top)
                z += phi[m]
            for m in range(L):
                phi[m] /= z
        T = 0.0
        for m in range(L):
            if attention == 0:
                phi[m] = math.erf(A[m])
            elif attention == 2:
                phi[m] = A[m]
            T += phi[m] * B[m]
        for m in range(L):
            if attention == 0:
                dA[m] = 2.0 / SQRT_PI * math.exp(-A[m] * A[m]) * B[m]
            elif attention == 1:
                dA[m] = phi[m] * (B[m] - T)
            else:
                dA[m] = B[m]
        r = T - y[i]
        total += r * r
        c = 2.0 * r / n
        for m in range(L):
            x = X[i, m]
            ck = c * lam * dA[m]
            cv = c * phi[m]
            for j in range(d):
                gk[j] += ck * x[j]
                gv[j] += cv * x[j]
    return total / n


class SampleWork:
    """The sample kernel's buffers for tokens of L tokens in d dimensions (allocated once)."""

    def __init__(self, L: int, d: int) -> None:
        self.gk, self.gv = np.empty(d), np.empty(d)
        self.A, self.B, self.phi, self.dA = np.empty(L), np.empty(L), np.empty(L), np.empty(L)

    def loss_grad(self, X, y, k, v, lam, attention):
        """(loss, grad_k, grad_v) on samples X (n, L, d), y (n,); the gradients are this object's
        buffers (the next call overwrites them)."""
        loss = _loss_grad(X, y, k, v, float(lam), int(attention), self.gk, self.gv,
                          self.A, self.B, self.phi, self.dA)  # fmt: skip
        return loss, self.gk, self.gv
