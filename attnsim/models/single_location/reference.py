"""Readable NumPy reference of single-location regression (Marion, Berthier, Biau and Boyer, ICLR
2025; SPEC §20): the data, the predictor, its loss and gradient on the tokens themselves, and the
population risk of the erf predictor in closed form in the five overlaps. The kernels of
:mod:`.kernels` are tested against it, and it against central differences and Monte Carlo.

The model. L tokens in R^d: x_1 = sqrt(d/2) k* + gamma z (the signal token), x_l ~ N(0, I_d) for
l >= 2; y = x_1 . v* + eps xi; k*, v* orthonormal. The predictor
T(X) = sum_l phi(lambda x_l . k) (x_l . v) with k, v on the unit sphere and phi = erf (their
model), the softmax over the tokens, or the identity (linear attention). The risk is
E[(T(X) - y)^2], label noise included.

The closed form (erf). By rotation invariance the risk depends on k, v only through
kappa = k.k*, nu = v.v*, theta = v.k*, eta = v*.k and rho = k.v. Token 1: A = x_1.k =
sqrt(d/2) kappa + gamma a, B = x_1.v = sqrt(d/2) theta + gamma b, x_1.v* = gamma c with (a, b, c)
standard normals of correlations rho (a, b), eta (a, c), nu (b, c); token l >= 2: A = a, B = b.
With s = lambda gamma, D = 1 + 2 s^2, u = lambda sqrt(d/2) kappa, w = u / sqrt(D), and
zeta(t, s) = E[erf(t + s g)^2] (g a standard normal):

    E[erf(t + s g)] = erf(t / sqrt(1 + 2 s^2)),   E[g erf(t + s g)] = s erf'(t/sqrt D) / sqrt D
    E[g^2 F(t + s g)] = E[F] + s^2 E[F''(t + s g)]                       (Stein, twice)
    zeta(t, s) = 1 - 8 T(sqrt 2 t / sqrt(1 + 2 s^2), 1 / sqrt(1 + 4 s^2))  (Owen's T: erf^2 through
                 the bivariate normal CDF at equal arguments; SciPy's owens_t, no quadrature)
    zeta'(t) = (2 / sqrt D) erf'(t / sqrt D) erf(t / sqrt(D (1 + 4 s^2)))

    E f_1    = sqrt(d/2) theta erf(w) + lambda gamma^2 rho erf'(w) / sqrt D
    E f_1^2  = (d/2 theta^2 + gamma^2) zeta(u) + 2 sqrt(d/2) theta gamma rho s zeta'(u)
               + gamma^2 rho^2 s^2 zeta''(u)
    E f_1 y  = gamma^2 nu erf(w) + lambda gamma^2 sqrt(d/2) eta theta erf'(w) / sqrt D
               + lambda^2 gamma^4 eta rho erf''(w) / D
    E f_l    = C rho,  C = 2 lambda / sqrt(pi (1 + 2 lambda^2))
    E f_l^2  = zeta(0, lambda) + K rho^2,  K = 8 lambda^2 / (pi (1 + 2 lambda^2) sqrt(1 + 4 lambda^2))
    R = E f_1^2 + (L-1) E f_l^2 + 2 (L-1) C rho E f_1 + (L-1)(L-2) C^2 rho^2 - 2 E f_1 y
        + gamma^2 + eps^2

(f_l = erf(lambda A_l) B_l; the tokens are independent and E y = 0.) It equals the authors'
formula (their dynamics.py R, with (L - 1) zeta(0, lambda) added as their run.py does) to 1e-15,
and Monte Carlo (tests/test_single_location.py). Its partial derivatives are written out in
:func:`risk_partials`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erf, owens_t

Array = np.ndarray
SQRT_PI = math.sqrt(math.pi)
OVERLAPS = ("kappa", "nu", "theta", "eta", "rho")  # k.k*, v.v*, v.k*, v*.k, k.v


# ------------------------------------------------------------------ data and predictor
def teacher_directions(d: int, rng: np.random.Generator) -> tuple[Array, Array]:
    """k*, v*: orthonormal, drawn as the authors' init_star (two normals, Gram-Schmidt)."""
    k_star = rng.standard_normal(d)
    k_star /= np.linalg.norm(k_star)
    v_star = rng.standard_normal(d)
    v_star -= (k_star @ v_star) * k_star
    return k_star, v_star / np.linalg.norm(v_star)


def initial_kv(init: str, k_star: Array, v_star: Array, rng: np.random.Generator) -> tuple[Array, Array]:
    """k(0), v(0) on the sphere: uniform (``sphere``), or on the authors' manifold (``manifold``:
    k orthogonal to v*, v orthogonal to k* and to k), as their initialize_on_manifold."""
    d = k_star.size
    k = rng.standard_normal(d)
    v = rng.standard_normal(d)
    if init == "sphere":
        return k / np.linalg.norm(k), v / np.linalg.norm(v)
    k -= (v_star @ k) * v_star
    k /= np.linalg.norm(k)
    v -= (k_star @ v) * k_star
    orth = k - (k_star @ k) * k_star
    orth /= np.linalg.norm(orth)
    v -= (orth @ v) * orth
    return k, v / np.linalg.norm(v)


def draw(n: int, L: int, k_star: Array, v_star: Array, gamma: float, eps: float,
         rng: np.random.Generator) -> tuple[Array, Array]:  # fmt: skip
    """``n`` samples: tokens X (n, L, d) with the signal on token 0, and labels y (n,). Draws, in
    this order: the signal token's noise (n, d), the other tokens (n, L - 1, d), the label noise."""
    d = k_star.size
    X = np.empty((n, L, d))
    X[:, 0] = math.sqrt(d / 2) * k_star + gamma * rng.standard_normal((n, d))
    X[:, 1:] = rng.standard_normal((n, L - 1, d))
    y = X[:, 0] @ v_star + eps * rng.standard_normal(n)
    return X, y


def weights(A: Array, attention: str) -> Array:
    """phi(A) over the last axis (the tokens): erf, softmax or the identity (linear attention)."""
    if attention == "erf":
        return erf(A)
    if attention == "softmax":
        E = np.exp(A - A.max(axis=-1, keepdims=True))
        return E / E.sum(axis=-1, keepdims=True)
    return A


def predict(X: Array, k: Array, v: Array, lam: float, attention: str) -> Array:
    """T(X) = sum_l phi(lambda X k)_l (X v)_l, shape (n,)."""
    return (weights(lam * (X @ k), attention) * (X @ v)).sum(axis=-1)


def loss(X: Array, y: Array, k: Array, v: Array, lam: float, attention: str) -> float:
    """The mean squared error (1/n) sum (T(X_i) - y_i)^2 (the authors' risk_fn)."""
    return float(np.mean((predict(X, k, v, lam, attention) - y) ** 2))


def grad(X: Array, y: Array, k: Array, v: Array, lam: float, attention: str) -> tuple[Array, Array]:
    """Euclidean gradients of :func:`loss` in k and v. With A = lambda X k, B = X v, r = T - y:
    dT/dv = sum_l phi_l x_l; dT/dk = lambda sum_l (dT/dA_l) x_l, dT/dA_l = erf'(A_l) B_l (erf),
    s_l (B_l - T) (softmax), B_l (linear)."""
    A, B = lam * (X @ k), X @ v
    phi = weights(A, attention)
    T = (phi * B).sum(axis=-1)
    r = 2.0 * (T - y) / y.size
    if attention == "erf":
        dA = 2.0 / SQRT_PI * np.exp(-(A**2)) * B
    elif attention == "softmax":
        dA = phi * (B - T[:, None])
    else:
        dA = B
    gk = lam * np.einsum("n,nl,nld->d", r, dA, X)
    gv = np.einsum("n,nl,nld->d", r, phi, X)
    return gk, gv


def riemannian_step(k: Array, v: Array, gk: Array, gv: Array, lr: float) -> tuple[Array, Array]:
    """Projected GD on the sphere, as published: x <- x - lr (g - (x.g) x), then x / |x|."""
    k = k - lr * (gk - (k @ gk) * k)
    v = v - lr * (gv - (v @ gv) * v)
    return k / np.linalg.norm(k), v / np.linalg.norm(v)


def overlaps(k: Array, v: Array, k_star: Array, v_star: Array) -> Array:
    """(kappa, nu, theta, eta, rho) = (k.k*, v.v*, v.k*, v*.k, k.v)."""
    return np.array([k @ k_star, v @ v_star, v @ k_star, v_star @ k, k @ v])


# ------------------------------------------------------------------ the closed form (erf)
def _erf1(x):
    return 2.0 / SQRT_PI * np.exp(-x * x)


def _erf2(x):
    return -2.0 * x * _erf1(x)


def _erf3(x):
    return (4.0 * x * x - 2.0) * _erf1(x)


def zeta(t, s):
    """zeta(t, s) = E[erf(t + s g)^2], g ~ N(0, 1): 1 - 8 T(sqrt 2 t / sqrt(1 + 2 s^2), 1/sqrt(1 + 4 s^2))."""
    return 1.0 - 8.0 * owens_t(math.sqrt(2.0) * t / math.sqrt(1 + 2 * s * s), 1.0 / math.sqrt(1 + 4 * s * s))


def zeta_derivatives(t: float, s: float) -> tuple[float, float, float]:
    """zeta', zeta'' and zeta''' in t: zeta' = (2/sqrt D) erf'(t/sqrt D) erf(t/c), c = sqrt(D (1 + 4 s^2))."""
    D = 1.0 + 2.0 * s * s
    rD, c = math.sqrt(D), math.sqrt(D * (1.0 + 4.0 * s * s))
    w, q = t / rD, t / c
    e0, e1, e2 = erf(q), _erf1(q), _erf2(q)
    z1 = 2.0 / rD * _erf1(w) * e0
    z2 = 2.0 / rD * (_erf2(w) / rD * e0 + _erf1(w) * e1 / c)
    z3 = 2.0 / rD * (_erf3(w) / D * e0 + 2.0 * _erf2(w) * e1 / (rD * c) + _erf1(w) * e2 / (c * c))
    return float(z1), float(z2), float(z3)


def _parts(o, lam, gamma, d, L, eps):
    kappa, nu, theta, eta, rho = o
    s = lam * gamma
    D = 1.0 + 2.0 * s * s
    rD = math.sqrt(D)
    h = math.sqrt(d / 2.0)
    u = lam * h * kappa
    w = u / rD
    mB = h * theta
    z0 = float(zeta(u, s))
    z1, z2, z3 = zeta_derivatives(u, s)
    C = 2.0 * lam / math.sqrt(math.pi * (1.0 + 2.0 * lam * lam))
    K = 8.0 * lam * lam / (math.pi * (1.0 + 2.0 * lam * lam) * math.sqrt(1.0 + 4.0 * lam * lam))
    znoise = float(zeta(0.0, lam))
    e0, e1, e2, e3 = float(erf(w)), float(_erf1(w)), float(_erf2(w)), float(_erf3(w))
    return locals()


def risk(o, lam: float, gamma: float, d: float, L: int, eps: float) -> float:
    """The population risk E[(T(X) - y)^2] of the erf predictor at overlaps ``o`` (the module's note)."""
    p = _parts(o, lam, gamma, d, L, eps)
    rho, nu, eta = p["rho"], p["nu"], p["eta"]
    g2, s, rD, D, mB, C = gamma**2, p["s"], p["rD"], p["D"], p["mB"], p["C"]
    Ef1 = mB * p["e0"] + lam * g2 * rho * p["e1"] / rD
    Ef1sq = (mB**2 + g2) * p["z0"] + 2.0 * mB * gamma * rho * s * p["z1"] + g2 * rho**2 * s**2 * p["z2"]
    Ef1y = g2 * nu * p["e0"] + lam * g2 * mB * eta * p["e1"] / rD + lam**2 * g2**2 * eta * rho * p["e2"] / D
    noise = (L - 1) * (p["znoise"] + p["K"] * rho**2) + 2 * (L - 1) * C * rho * Ef1
    noise += (L - 1) * (L - 2) * C**2 * rho**2
    return Ef1sq + noise - 2.0 * Ef1y + g2 + eps**2


def risk_partials(o, lam: float, gamma: float, d: float, L: int, eps: float) -> Array:
    """dR/d(kappa, nu, theta, eta, rho) of :func:`risk` (chain rule through u and w in kappa,
    mu_B = sqrt(d/2) theta; zeta''' enters through d/dkappa of the zeta'' term)."""
    p = _parts(o, lam, gamma, d, L, eps)
    rho, nu, eta = p["rho"], p["nu"], p["eta"]
    g2, s, rD, D, mB, C, K, h = gamma**2, p["s"], p["rD"], p["D"], p["mB"], p["C"], p["K"], p["h"]
    e0, e1, e2, e3 = p["e0"], p["e1"], p["e2"], p["e3"]
    z0, z1, z2, z3 = p["z0"], p["z1"], p["z2"], p["z3"]
    Ef1 = mB * e0 + lam * g2 * rho * e1 / rD
    du, dw = lam * h, lam * h / rD  # d/dkappa of u and w
    # kappa
    Ef1sq_k = du * ((mB**2 + g2) * z1 + 2.0 * mB * gamma * rho * s * z2 + g2 * rho**2 * s**2 * z3)
    Ef1_k = dw * (mB * e1 + lam * g2 * rho * e2 / rD)
    Ef1y_k = dw * (g2 * nu * e1 + lam * g2 * mB * eta * e2 / rD + lam**2 * g2**2 * eta * rho * e3 / D)
    R_kappa = Ef1sq_k + 2 * (L - 1) * C * rho * Ef1_k - 2.0 * Ef1y_k
    # nu
    R_nu = -2.0 * g2 * e0
    # theta (mu_B = h theta)
    Ef1sq_t = h * (2.0 * mB * z0 + 2.0 * gamma * rho * s * z1)
    R_theta = Ef1sq_t + 2 * (L - 1) * C * rho * h * e0 - 2.0 * h * lam * g2 * eta * e1 / rD
    # eta
    R_eta = -2.0 * (lam * g2 * mB * e1 / rD + lam**2 * g2**2 * rho * e2 / D)
    # rho
    Ef1sq_r = 2.0 * mB * gamma * s * z1 + 2.0 * g2 * rho * s**2 * z2
    Ef1_r = lam * g2 * e1 / rD
    Ef1y_r = lam**2 * g2**2 * eta * e2 / D
    R_rho = (
        Ef1sq_r
        + 2 * (L - 1) * K * rho
        + 2 * (L - 1) * C * (Ef1 + rho * Ef1_r)
        + 2 * (L - 1) * (L - 2) * C**2 * rho
        - 2.0 * Ef1y_r
    )
    return np.array([R_kappa, R_nu, R_theta, R_eta, R_rho])


def gram(o) -> Array:
    """The Gram matrix of (k, v, k*, v*) at overlaps o (unit norms, k*.v* = 0)."""
    kappa, nu, theta, eta, rho = o
    return np.array(
        [[1.0, rho, kappa, eta], [rho, 1.0, theta, nu], [kappa, theta, 1.0, 0.0], [eta, nu, 0.0, 1.0]]
    )


def pgd_overlaps(o, partials, lr: float) -> Array:
    """One projected GD step on the population risk, in the overlaps: grad_k R = R_kappa k* +
    R_eta v* + R_rho v and grad_v R = R_theta k* + R_nu v* + R_rho k lie in span(k, v, k*, v*);
    the new k and v are combinations of those four vectors, and their overlaps follow from the Gram
    matrix (exact at any d)."""
    kappa, nu, theta, eta, rho = o
    Rk, Rn, Rt, Re, Rr = partials
    ck = Rk * kappa + Re * eta + Rr * rho
    cv = Rt * theta + Rn * nu + Rr * rho
    a = np.array([1.0 + lr * ck, -lr * Rr, -lr * Rk, -lr * Re])  # k~ in the basis (k, v, k*, v*)
    b = np.array([-lr * Rr, 1.0 + lr * cv, -lr * Rt, -lr * Rn])
    G = gram(o)
    Ga, Gb = G @ a, G @ b
    nk, nv = math.sqrt(a @ Ga), math.sqrt(b @ Gb)
    return np.array([Ga[2] / nk, Gb[3] / nv, Gb[2] / nv, Ga[3] / nk, (a @ Gb) / (nk * nv)])
