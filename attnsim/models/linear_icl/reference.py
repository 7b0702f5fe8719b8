"""Readable NumPy reference of linear attention trained in context (Lu, Letey, Zavatone-Veth, Maiti
and Pehlevan, PNAS 2025; SPEC §21): the data, its sufficient statistics drawn exactly, the reduced
linear attention, its loss and gradient, and the exact errors e_ICL and e_IDG of a given Gamma.

The data. Tokens x ~ N(0, I_d / d); a task w with |w| = sqrt(d); a context of l = alpha d pairs
(x_i, y_i = x_i . w + eps_i), eps_i ~ N(0, rho), and a query (x_q, y_q). The reduced linear
attention predicts y_hat = <Gamma, H_Z> = x_q^T Gamma h with h = [(d/l) sum_i y_i x_i,
(1/l) sum_i y_i^2] (d + 1 numbers): a sequence enters only through x_q, h and y_q.

h drawn without the context (exact in distribution): write a_i = x_i . w (standard normal),
x_i = (a_i / sqrt d) w_hat + x_i_perp. Then sum y_i x_i = (S_ya / sqrt d) w_hat + sqrt(S_yy / d) P_perp z
with z ~ N(0, I_d) independent of the sums S_ya = sum y_i a_i and S_yy = sum y_i^2, and those
come from the 2 x 2 Wishart matrix of (a_i, eps_i), sum [a eps][a eps]^T ~ W_2(l, diag(1, rho)),
drawn by Bartlett's decomposition: (chi_l, N(0, 1), chi_{l-1}). A sequence costs O(d), not O(l d)
(:func:`features`; :func:`features_from_contexts` draws the contexts, for the tests).

The errors of a Gamma = [G, g] (G d x d, g the last column). Over a fresh query,
E(y_q - x_q^T Gamma h)^2 = rho + |w - Gamma h|^2 / d; over a fresh context (Isserlis):
E h_d = w, E h_s = s2, E h_d h_d^T = (s2 / alpha) I + (1 + 1/l) w w^T, E h_d h_s = (1 + 2/l) s2 w,
E h_s^2 = (1 + 2/l) s2^2 with s2 = |w|^2 / d + rho = 1 + rho. Averaged over tasks of mean mu and
second moment R:

    e = 1 + rho - (2/d) [tr(G R) + s2 mu . g] + (1/d) [(s2/alpha) |G|_F^2 + (1 + 1/l) tr(G^T G R)
        + 2 (1 + 2/l) s2 g . G mu + (1 + 2/l) s2^2 |g|^2]

e_ICL: fresh tasks (mu = 0, R = I: tasks uniform on the sphere |w| = sqrt d, as the training tasks;
for Gaussian tasks add (2/d^2)(1 + 2/l)|g|^2); e_IDG: the k training tasks (their mean and second
moment). The same form as the authors' gen_err_analytical_NEW; checked by Monte Carlo over fresh
contexts (tests/test_linear_icl.py).
"""

from __future__ import annotations

import math

import numpy as np

Array = np.ndarray


def task_count(d: int, kappa: float, tau: float) -> tuple[int, int, int]:
    """(k, r, n): k = floor(kappa d) tasks, each used by r = round(tau d^2 / k) sequences, n = r k
    (the authors' rounding); kappa = inf: k = n = floor(tau d^2) tasks, one sequence each."""
    if math.isinf(kappa):
        n = int(tau * d * d)
        return n, 1, n
    k = int(kappa * d)
    r = int(round(tau * d * d / k))
    return k, r, r * k


def draw_tasks(k: int, d: int, rng: np.random.Generator) -> Array:
    """k tasks, normal then rescaled to |w| = sqrt(d) (the authors' B)."""
    B = rng.standard_normal((k, d))
    return B * (math.sqrt(d) / np.linalg.norm(B, axis=1, keepdims=True))


def features(W: Array, ell: int, rho: float, rng: np.random.Generator) -> tuple[Array, Array, Array]:
    """For tasks W (n, d), one sequence each: x_q (n, d), h (n, d + 1), y_q (n,), drawn exactly
    without the contexts (the module's note). Draws, in order: the Wishart factors (chi^2_l,
    normal, chi^2_(l-1)), z (n, d), x_q (n, d), the query's label noise."""
    n, d = W.shape
    w_hat = W / math.sqrt(d)
    a11 = np.sqrt(rng.chisquare(ell, n))
    a21 = rng.standard_normal(n)
    a22 = np.sqrt(rng.chisquare(ell - 1, n)) if ell > 1 else np.zeros(n)
    s_aa, s_ae, s_ee = a11 * a11, math.sqrt(rho) * a11 * a21, rho * (a21 * a21 + a22 * a22)
    s_ya, s_yy = s_aa + s_ae, s_aa + 2.0 * s_ae + s_ee
    z = rng.standard_normal((n, d))
    z -= np.einsum("nd,nd->n", z, w_hat)[:, None] * w_hat
    h = np.empty((n, d + 1))
    h[:, :d] = (d / ell) * ((s_ya / math.sqrt(d))[:, None] * w_hat + np.sqrt(s_yy / d)[:, None] * z)
    h[:, d] = s_yy / ell
    xq = rng.standard_normal((n, d)) / math.sqrt(d)
    yq = np.einsum("nd,nd->n", xq, W) + math.sqrt(rho) * rng.standard_normal(n)
    return xq, h, yq


def features_from_contexts(
    W: Array, ell: int, rho: float, rng: np.random.Generator
) -> tuple[Array, Array, Array]:
    """The same as :func:`features`, from drawn contexts (l x d tokens per sequence)."""
    n, d = W.shape
    X = rng.standard_normal((n, ell, d)) / math.sqrt(d)
    y = np.einsum("nld,nd->nl", X, W) + math.sqrt(rho) * rng.standard_normal((n, ell))
    h = np.empty((n, d + 1))
    h[:, :d] = (d / ell) * np.einsum("nl,nld->nd", y, X)
    h[:, d] = (y * y).sum(axis=1) / ell
    xq = rng.standard_normal((n, d)) / math.sqrt(d)
    yq = np.einsum("nd,nd->n", xq, W) + math.sqrt(rho) * rng.standard_normal(n)
    return xq, h, yq


def predict(xq: Array, h: Array, Gamma: Array) -> Array:
    """y_hat = x_q^T Gamma h per sequence."""
    return np.einsum("nd,nd->n", xq @ Gamma, h)


def loss(xq: Array, h: Array, y: Array, Gamma: Array, ridge: float) -> float:
    """The ridge objective (1/n) sum (y - y_hat)^2 + (lambda/d) |Gamma|_F^2 (the authors' ridge: their
    linear system adds (n/d) lambda to the summed squares)."""
    d = xq.shape[1]
    return float(np.mean((y - predict(xq, h, Gamma)) ** 2) + ridge / d * np.sum(Gamma * Gamma))


def grad(xq: Array, h: Array, y: Array, Gamma: Array, ridge: float) -> Array:
    """Its gradient: -(2/n) sum r x_q h^T + (2 lambda / d) Gamma, r = y - y_hat."""
    n, d = xq.shape
    r = y - predict(xq, h, Gamma)
    return -2.0 / n * (xq.T * r) @ h + 2.0 * ridge / d * Gamma


def error(Gamma: Array, alpha_ell: tuple[float, int], mu: Array, R: Array, rho: float) -> float:
    """The expected squared error of Gamma on a fresh sequence of a task with mean ``mu`` and
    second moment ``R`` (|w| = sqrt d); ``alpha_ell``: (alpha, l) (the module's note)."""
    alpha, ell = alpha_ell
    d = Gamma.shape[0]
    G, g = Gamma[:, :d], Gamma[:, d]
    s2 = 1.0 + rho
    lin = np.trace(G @ R) + s2 * (mu @ g)
    quad = (
        s2 / alpha * np.sum(G * G)
        + (1.0 + 1.0 / ell) * np.trace(G.T @ G @ R)
        + 2.0 * (1.0 + 2.0 / ell) * s2 * (g @ G @ mu)
        + (1.0 + 2.0 / ell) * s2 * s2 * (g @ g)
    )
    return float(1.0 + rho - 2.0 / d * lin + quad / d)
