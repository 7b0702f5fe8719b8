"""Engines: the coordinates in which gradient descent is simulated (SPEC §4).

Every engine produces a :class:`Problem`: training tokens X2 (nT, k), an
initial state W (k, r), p (r,), nu (k,), and the geometry needed for exact
population metrics in those coordinates. The kernels never know which engine
built their arrays.

dense
    k = r = d; W is the full d x d matrix. The reference.
reduced
    GD never leaves a small subspace. Q (d x k) is an orthonormal basis of
    span{training tokens, nu, mu+, mu-}; R (d x r) one of span{W(0)^T Q} plus
    p(0) when p(0) != 0. Every gradient g = sum c_it x_it lies in span(Q), so
    W - W(0) stays in Q (.) R^T, p in span(R) and nu in span(Q). With
    X~ = X Q, W~ = Q^T W R, p~ = R^T p and nu~ = Q^T nu the same kernels give the
    dense trajectory exactly. The part of q = W p outside span(Q) is
    (I - QQ^T) W(0) R p~, whose squared norm is p~^T G_perp p~.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import solve_triangular

from .config import Config, ConfigError
from .data import Dataset, Streams, draw_p0, draw_W0

DENSE_MAX_BYTES = 2 * 1024**3  # auto stops using a d x d W(0) above this


@dataclass
class Problem:
    """Everything the GD driver and the metrics need, in engine coordinates.

    Attributes
    ----------
    X2 : (n*T, k) training tokens.   y : (n,) observed labels.   T : tokens per sample.
    W0 : (k, r), p0 : (r,), nu0 : (k,) initial state.
    mu_pos, mu_neg : (k,) class signals in engine coordinates (None if unknown).
    G_perp : (r, r) with ||q_perp||^2 = p^T G_perp p (None: q lies in span(Q)).
    X2_test : (m*T, k) test tokens; O_test : (m*T, r) their products with the
    part of W(0) R outside span(Q) (None when zero); y_test : (m,).
    """

    engine: str
    reason: str
    X2: np.ndarray
    y: np.ndarray
    T: int
    W0: np.ndarray
    p0: np.ndarray
    nu0: np.ndarray
    mu_pos: np.ndarray | None
    mu_neg: np.ndarray | None
    G_perp: np.ndarray | None = None
    X2_test: np.ndarray | None = None
    O_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    Q: np.ndarray | None = None
    R: np.ndarray | None = None
    W0_full: np.ndarray | None = None
    info: dict = field(default_factory=dict)

    @property
    def k(self) -> int:
        return self.X2.shape[1]

    @property
    def r(self) -> int:
        return self.p0.size

    def q_norm2(self, W: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, float]:
        """q in engine coordinates (Q^T q) and the full ||q||^2."""
        qk = W @ p
        qq = float(qk @ qk)
        if self.G_perp is not None:
            qq += max(float(p @ self.G_perp @ p), 0.0)
        return qk, qq

    def lift(self, W: np.ndarray, p: np.ndarray, nu: np.ndarray) -> dict[str, np.ndarray]:
        """Full-space W, p, q = W p and nu (dense engine: the arrays themselves)."""
        if self.Q is None:
            return {"W": W, "p": p, "q": W @ p, "nu": nu}
        Q, R, W0 = self.Q, self.R, self.W0_full
        dW = W - self.W0
        return {
            "W": W0 + Q @ dW @ R.T,
            "p": R @ p,
            "q": W0 @ (R @ p) + Q @ (dW @ p),
            "nu": Q @ nu,
        }


def choose_engine(cfg: Config, ds: Dataset | None) -> tuple[str, str]:
    """The engine to use and why (SPEC §4)."""
    if cfg.engine != "auto":
        return cfg.engine, "requested"
    dense_bytes = 8 * cfg.d * cfg.d
    if dense_bytes <= DENSE_MAX_BYTES:
        return "reduced", "auto: exact reduced coordinates (cost independent of d)"
    raise ConfigError(
        f"d: a {cfg.d} x {cfg.d} W(0) needs {dense_bytes / 1e9:.1f} GB; "
        "the implicit engine for such d needs init_W=gaussian"
    )


def build(cfg: Config, ds: Dataset, streams: Streams, engine: str, reason: str) -> Problem:
    """Set up the chosen engine from a dataset."""
    if engine == "dense":
        return _build_dense(cfg, ds, streams, reason)
    if engine == "reduced":
        return _build_reduced(cfg, ds, streams, reason)
    raise ConfigError(f"engine: {engine!r} is not available for this run")


def _initial_weights(cfg: Config, ds: Dataset, streams: Streams) -> tuple[np.ndarray, np.ndarray]:
    d = ds.X.shape[2]
    W0 = ds.W0 if ds.W0 is not None else draw_W0(cfg, streams.init, d)
    p0 = ds.p0 if ds.p0 is not None else draw_p0(cfg, streams.init, d)
    return np.ascontiguousarray(W0), np.ascontiguousarray(p0)


def _flat(X: np.ndarray | None) -> np.ndarray | None:
    return None if X is None else np.ascontiguousarray(X.reshape(-1, X.shape[2]))


def _build_dense(cfg: Config, ds: Dataset, streams: Streams, reason: str) -> Problem:
    W0, p0 = _initial_weights(cfg, ds, streams)
    return Problem(
        engine="dense",
        reason=reason,
        X2=_flat(ds.X),
        y=ds.y,
        T=ds.X.shape[1],
        W0=W0,
        p0=p0,
        nu0=ds.nu.copy(),
        mu_pos=ds.mu_pos,
        mu_neg=ds.mu_neg,
        X2_test=_flat(ds.X_test),
        y_test=ds.y_test,
    )


def orthonormal_basis(A: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Orthonormal basis (d, k) of the column span of A (d, m).

    Cholesky-QR of the m x m Gram matrix, done twice for orthogonality to
    machine precision (d m^2 flops, cheaper than Householder QR for d >> m);
    rank-deficient or ill-conditioned input falls back to an SVD that drops
    directions below ``rtol`` times the largest singular value.
    """
    if A.shape[1] == 0:
        return np.zeros((A.shape[0], 0))
    try:
        Q = A
        for _ in range(2):
            L = np.linalg.cholesky(Q.T @ Q)
            Q = solve_triangular(L, Q.T, lower=True).T
        d_min = np.abs(np.diag(L)).min()
        if np.isfinite(Q).all() and d_min > 1e-6 and np.abs(Q.T @ Q - np.eye(Q.shape[1])).max() < 1e-12:
            return np.ascontiguousarray(Q)
    except np.linalg.LinAlgError:
        pass
    U, sv, _ = np.linalg.svd(A, full_matrices=False)
    return np.ascontiguousarray(U[:, sv > rtol * sv[0]])


def extend_basis(Q: np.ndarray, v: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """Q with the direction of v outside span(Q) appended (if there is one)."""
    norm = np.linalg.norm(v)
    if norm == 0:
        return Q
    res = v - Q @ (Q.T @ v)
    res = res - Q @ (Q.T @ res)  # twice is enough (Kahan-Parlett)
    rn = np.linalg.norm(res)
    if rn <= rtol * norm:
        return Q
    return np.ascontiguousarray(np.concatenate([Q, (res / rn)[:, None]], axis=1))


def _build_reduced(cfg: Config, ds: Dataset, streams: Streams, reason: str) -> Problem:
    n, T, d = ds.X.shape
    cols = [ds.X.reshape(n * T, d).T]
    cols += [m[:, None] for m in (ds.mu_pos, ds.mu_neg) if m is not None]
    Q = extend_basis(orthonormal_basis(np.concatenate(cols, axis=1)), ds.nu)
    if ds.W0 is not None:
        W0T_Q = ds.W0.T @ Q
        W0 = ds.W0
    else:  # row blocks: W0^T Q = sum_b W0[b]^T Q[b], memory O(d k) beyond W0 itself
        W0 = draw_W0(cfg, streams.init, d)
        W0T_Q = W0.T @ Q
    p0_full = ds.p0 if ds.p0 is not None else draw_p0(cfg, streams.init, d)
    R = extend_basis(orthonormal_basis(W0T_Q), p0_full)
    P = W0 @ R  # (d, r)
    W0r = Q.T @ P  # = Q^T W0 R, (k, r)
    P_perp = P - Q @ W0r
    G_perp = P_perp.T @ P_perp
    proj = lambda v: None if v is None else Q.T @ v  # noqa: E731
    X2_test = O_test = None
    if ds.X_test is not None:
        Xt = ds.X_test.reshape(-1, d)
        X2_test, O_test = Xt @ Q, Xt @ P_perp
    return Problem(
        engine="reduced",
        reason=reason,
        X2=np.ascontiguousarray(ds.X.reshape(n * T, d) @ Q),
        y=ds.y,
        T=T,
        W0=np.ascontiguousarray(W0r),
        p0=R.T @ p0_full,
        nu0=Q.T @ ds.nu,
        mu_pos=proj(ds.mu_pos),
        mu_neg=proj(ds.mu_neg),
        G_perp=G_perp,
        X2_test=X2_test,
        O_test=O_test,
        y_test=ds.y_test,
        Q=Q,
        R=R,
        W0_full=W0,
        info={"k": Q.shape[1], "r": R.shape[1]},
    )
