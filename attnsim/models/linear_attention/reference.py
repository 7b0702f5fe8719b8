"""Readable NumPy reference of multi-head linear attention trained in context (Zhang, Singh, Latham
and Saxe, ICML 2025; SPEC §21b): the data, the attention on whole sequences, the reduced predictor
it equals, the population loss in closed form and its saddles.

The model. x ~ N(0, Lambda) in D dimensions, a task w ~ N(0, I_D) per sequence, N context pairs
(x_n, y_n = w . x_n) and a query x_q; the sequence matrix X = [[x_1 ... x_N x_q], [y_1 ... y_N 0]]
((D+1) x (N+1)); ATTN_M(X) = X + sum_i (1/N) W^V_i X X^T W^KQ_i X and ATTN_S the same with
W^KQ_i = W^K_i^T W^Q_i (rank r); the prediction is the (D+1, N+1) entry, the loss squared.

The reduced predictor. Writing v_i for W^V_i's last row and K_i for W^KQ_i's first D columns, the
prediction is sum_i v_i^T ((1/N) X X^T) K_i x_q. The authors initialize the value's x-part of that
row and the key's label column at 0 (their net.py); those blocks then stay 0 under the population
gradient flow: their gradients are odd in w (w -> -w flips y and y_q), so their population averages
vanish on that subspace. On it, with c_i the value's label weight and B_i the key-query block
between the context's x and the query's x (B_i = W^K_i[:, :D]^T W^Q_i[:, :D] for ATTN_S),

    y_hat = sum_i c_i u^T B_i x_q = <T, u x_q^T>,   T = sum_i c_i B_i,   u = (1/N) sum_n y_n x_n,

a two-layer linear network on the cubic feature z = u x_q^T, their ATTN_M equivalence
(:func:`attention` computes the whole sequence to check it). The population loss over x, w is a
quadratic in T (Isserlis): E u = Lambda w, E[u u^T | w] = (w^T Lambda w / N) Lambda +
(1 + 1/N) Lambda w w^T Lambda, so with Sigma_u = (tr Lambda / N) Lambda + (1 + 1/N) Lambda^2,

    L(T) = tr Lambda - 2 tr(T^T Lambda^2) + tr(T^T Sigma_u T Lambda).

Its stationary points with T diagonal in Lambda's eigenbasis on m of the directions are the
saddles: L(M_m) = tr Lambda - sum_{d <= m} lambda_d / (1 + (1 + tr Lambda / lambda_d) / N), largest
eigenvalues first, L(M_D) the global minimum (Zhang, Frei and Bartlett's value): the authors'
formula, derived here.
"""

from __future__ import annotations

import numpy as np

Array = np.ndarray


def eigenvalues(D: int, spectrum: str) -> Array:
    """Lambda's eigenvalues, largest first, trace 1: proportional to D, D-1, ..., 1 (``linear``) or equal."""
    lam = np.arange(D, 0, -1, dtype=float) if spectrum == "linear" else np.ones(D)
    return lam / lam.sum()


def saddle_losses(lam: Array, N: int) -> Array:
    """L(M_0), ..., L(M_D): tr Lambda minus lambda_d / (1 + (1 + tr / lambda_d) / N) per learned direction."""
    tr = float(lam.sum())
    gains = lam / (1.0 + (1.0 + tr / lam) / N)
    return np.concatenate([[tr], tr - np.cumsum(gains)])


def draw(P: int, N: int, lam: Array, rng: np.random.Generator) -> tuple[Array, Array, Array, Array]:
    """P sequences in Lambda's eigenbasis (Lambda diagonal): contexts X (P, N, D), their labels Y
    (P, N), queries x_q (P, D) and targets y_q (P,). Draws, in order: the tasks (P, D), the
    context inputs, the queries."""
    D = lam.size
    W = rng.standard_normal((P, D))
    X = rng.standard_normal((P, N, D)) * np.sqrt(lam)
    xq = rng.standard_normal((P, D)) * np.sqrt(lam)
    return X, np.einsum("pnd,pd->pn", X, W), xq, np.einsum("pd,pd->p", xq, W)


def cubic_features(X: Array, Y: Array, xq: Array) -> Array:
    """u = (1/N) sum_n y_n x_n per sequence (P, D): the feature is z = u x_q^T."""
    return np.einsum("pn,pnd->pd", Y, X) / X.shape[1]


def attention(X: Array, Y: Array, xq: Array, WV: Array, WKQ: Array) -> Array:
    """The whole ATTN(X)_{D+1, N+1} of every sequence: X + sum_i (1/N) W^V_i X X^T W^KQ_i X
    with the query's label 0; WV, WKQ (H, D+1, D+1)."""
    P, N, D = X.shape
    S = np.zeros((P, D + 1, N + 1))
    S[:, :D, :N] = np.swapaxes(X, 1, 2)
    S[:, D, :N] = Y
    S[:, :D, N] = xq
    G = S @ np.swapaxes(S, 1, 2) / N  # (P, D+1, D+1)
    out = np.einsum("hj,pjk,hkl,pl->p", WV[:, D, :], G, WKQ, S[:, :, N])
    return S[:, D, N] + out


def product(params: dict, parametrization: str) -> Array:
    """T = sum_i c_i B_i (D x D)."""
    c = params["c"]
    if parametrization == "merged":
        return np.einsum("h,hab->ab", c, params["B"])
    return np.einsum("h,hra,hrb->ab", c, params["K"], params["Q"])


class Moments:
    """The loss as a quadratic in T: L(T) = c0 - 2 <m, T> + vec(T)^T M vec(T); population
    (closed form) or a sample's (P sequences)."""

    def __init__(self, c0: float, m: Array, M: Array) -> None:
        self.c0, self.m, self.M = c0, m, M
        self.D = m.shape[0]

    @classmethod
    def population(cls, lam: Array, N: int) -> Moments:
        Lam = np.diag(lam)
        Su = (lam.sum() / N) * Lam + (1.0 + 1.0 / N) * Lam @ Lam
        return cls(float(lam.sum()), Lam @ Lam, np.kron(Su, Lam))

    @classmethod
    def sample(cls, u: Array, xq: Array, yq: Array) -> Moments:
        P, D = u.shape
        Z = (u[:, :, None] * xq[:, None, :]).reshape(P, D * D)
        return cls(float(yq @ yq / P), (Z.T @ yq / P).reshape(D, D), Z.T @ Z / P)

    def loss(self, T: Array) -> float:
        t = T.ravel()
        return float(self.c0 - 2.0 * (self.m.ravel() @ t) + t @ self.M @ t)

    def grad_T(self, T: Array) -> Array:
        """dL/dT = -2 m + 2 M vec(T) (M symmetric)."""
        return (-2.0 * self.m.ravel() + 2.0 * self.M @ T.ravel()).reshape(self.D, self.D)


def grads(params: dict, parametrization: str, G: Array) -> dict:
    """The parameters' gradients from dL/dT = G: dL/dc_i = <B_i, G>; merged dL/dB_i = c_i G;
    separate (B_i = K_i^T Q_i) dL/dK_i = c_i Q_i G^T, dL/dQ_i = c_i K_i G."""
    c = params["c"]
    if parametrization == "merged":
        B = params["B"]
        return {"c": np.einsum("hab,ab->h", B, G), "B": c[:, None, None] * G[None]}
    K, Q = params["K"], params["Q"]
    B = np.einsum("hra,hrb->hab", K, Q)
    return {
        "c": np.einsum("hab,ab->h", B, G),
        "K": c[:, None, None] * np.einsum("hrb,ab->hra", Q, G),
        "Q": c[:, None, None] * np.einsum("hra,ab->hrb", K, G),
    }


def embed(params: dict, parametrization: str, D: int) -> tuple[Array, Array]:
    """The reduced parameters as the whole W^V_i and W^KQ_i ((H, D+1, D+1) each): the value's label
    row (0 on x, c_i on the label), the key-query block on the inputs; every other entry 0."""
    H = params["c"].size
    WV = np.zeros((H, D + 1, D + 1))
    WV[:, D, D] = params["c"]
    WKQ = np.zeros((H, D + 1, D + 1))
    B = params["B"] if parametrization == "merged" else np.einsum("hra,hrb->hab", params["K"], params["Q"])
    WKQ[:, :D, :D] = B
    return WV, WKQ
