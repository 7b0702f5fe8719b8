"""Where training ends: the max-margin (att-SVM) limit of token selection (SPEC §13).

Gradient descent on softmax attention converges in direction to the
hard-margin solution that separates each sample's selected token from its
other tokens (Tarzanagh et al., "Max-Margin Token Selection in Attention
Mechanism", 2023; "Transformers as Support Vector Machines"): with a
selection alpha_i per training sample,

    q_mm = argmin |q|  subject to  (x_{i alpha_i} - x_it) . q >= 1  for all i, t != alpha_i,

q = W p the direction of the logits. With W fixed and p trained the variable is
p and the constraints read (x_{i alpha_i} - x_it)^T W p >= 1 (:func:`att_svm`
with ``M = W``). Both are least-distance programs, solved exactly here:
Lawson and Hanson's reduction to non-negative least squares (scipy's NNLS)
finds the active set, and the equality-constrained problem on that set is
then solved directly, so the solution satisfies the KKT conditions to rounding
(the residual is reported). A selection that no direction separates is
detected (the NNLS residual vanishes) and reported, not returned as a number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.optimize import nnls

from ...config import Config
from .steppers import state_q

if TYPE_CHECKING:  # names in annotations only
    from .population import Population
    from .problem import Problem

INFEASIBLE_TOL = 1e-10  # relative size of the NNLS residual below which no direction separates


@dataclass
class SVMSolution:
    """The max-margin direction of a selection, or why there is none.

    Attributes
    ----------
    feasible : some direction separates the selected tokens.
    v : (r,) the minimum-norm variable (q itself, or p when ``M`` maps p to q); None if infeasible.
    dual : (m,) the multipliers of the m = n (T - 1) constraints.
    kkt : the largest relative KKT residual (primal feasibility, stationarity,
        complementary slackness; dual feasibility holds by construction).
    support : how many constraints are active (multiplier > 0).
    """

    feasible: bool
    v: np.ndarray | None
    dual: np.ndarray | None
    kkt: float
    support: int
    message: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def norm(self) -> float:
        return float(np.linalg.norm(self.v)) if self.v is not None else float("nan")


def constraint_rows(X: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """(n (T - 1), k) rows x_{i alpha_i} - x_it over t != alpha_i; X is (n, T, k)."""
    n, T, _ = X.shape
    sel = X[np.arange(n), alpha]  # (n, k)
    keep = np.ones((n, T), dtype=bool)
    keep[np.arange(n), alpha] = False
    return (sel[:, None, :] - X)[keep]


def att_svm(X: np.ndarray, alpha: np.ndarray, M: np.ndarray | None = None) -> SVMSolution:
    """The att-SVM of a selection: min |v| s.t. (x_{i alpha_i} - x_it)^T M v >= 1.

    Parameters
    ----------
    X : (n, T, k) tokens (any coordinates with the Euclidean inner product, e.g. engine coordinates).
    alpha : (n,) selected token per sample.
    M : (k, r) map from the variable to q (None: the identity, v = q).
    """
    X = np.asarray(X, dtype=np.float64)
    alpha = np.asarray(alpha, dtype=np.int64)
    A = constraint_rows(X, alpha)
    G = A if M is None else A @ np.asarray(M, dtype=np.float64)
    m, r = G.shape
    scale = float(np.abs(G).max()) if G.size else 0.0
    if m == 0:
        return SVMSolution(True, np.zeros(r), np.zeros(0), 0.0, 0, "no constraints")
    if scale == 0.0:
        return SVMSolution(False, None, None, float("nan"), 0, "every selected token equals its competitors")
    # Lawson-Hanson: min |v| s.t. G v >= 1 <=> NNLS min |E u - f|, E = [G^T; 1^T], f = e_{r+1}
    Gs = G / scale  # scaled for the solver; v = v_s / scale
    E = np.vstack([Gs.T, np.ones((1, m))])
    f = np.zeros(r + 1)
    f[-1] = 1.0
    u, res = nnls(E, f, maxiter=50 * (m + r + 1))
    if res <= INFEASIBLE_TOL:
        return SVMSolution(False, None, None, float("nan"), 0, "no direction separates this selection")
    c = 1.0 - u.sum()
    lam = u / c
    support = np.flatnonzero(lam > 1e-12 * max(1.0, lam.max()))
    v_s, lam_s = _polish(Gs, support)
    if v_s is None or np.any(lam_s < 0) or np.min(Gs @ v_s) < 1.0 - 1e-9:
        v_s, lam_full = Gs.T @ lam, lam  # the NNLS solution itself
    else:
        lam_full = np.zeros(m)
        lam_full[support] = lam_s
    v = v_s / scale
    dual = lam_full / scale**2  # v = G^T dual with G = scale Gs
    kkt = kkt_residual(G, v, dual)
    return SVMSolution(True, v, dual, kkt, int(np.count_nonzero(dual)), "ok")


def w_svm(X: np.ndarray, alpha: np.ndarray, p: np.ndarray) -> SVMSolution:
    """The W-SVM of a selection, W trained with p fixed: min |W|_F s.t.
    (x_{i alpha_i} - x_it)^T W p >= 1 (the limit of GD on W alone).

    Closed form through the att-SVM in q: every feasible W gives a feasible
    q = W p, and |W|_F >= |W p| / |p| >= |q_mm| / |p|, with equality at
    W_mm = q_mm p^T / |p|^2; its multipliers are those of q_mm over |p|^2.
    ``v`` is W_mm (k, r); the KKT residual is that of the W program itself.
    """
    p = np.asarray(p, dtype=np.float64)
    pp = float(p @ p)
    if not pp > 0.0:
        return SVMSolution(False, None, None, float("nan"), 0, "p = 0: no W separates the selection")
    sol = att_svm(X, alpha)
    if not sol.feasible:
        return sol
    W = np.outer(sol.v, p) / pp
    dual = sol.dual / pp
    A = constraint_rows(np.asarray(X, dtype=np.float64), np.asarray(alpha, dtype=np.int64))
    # the KKT conditions of the W program, its constraint rows a_j p^T never formed: G vec(W) = A W p,
    # G^T dual = (A^T dual) p^T
    gv = A @ (W @ p)
    wn = max(float(np.linalg.norm(W)), 1e-300)
    primal = max(0.0, float(np.max(1.0 - gv))) if gv.size else 0.0
    station = float(np.linalg.norm(W - np.outer(A.T @ dual, p))) / wn
    scale = float(np.abs(A).max()) * math.sqrt(pp) if A.size else 0.0
    slack = float(np.max(np.abs(dual * (gv - 1.0)))) * scale / wn if dual.size else 0.0
    kkt = max(primal, station, slack, max(0.0, float(-dual.min())) if dual.size else 0.0)
    return SVMSolution(True, W, dual, kkt, sol.support, "ok", {"q_mm": sol.v})


def local_optimality(
    X: np.ndarray, alpha: np.ndarray, y: np.ndarray, nu: np.ndarray, dual: np.ndarray, tol: float = 1e-12
) -> dict:
    """The certificate that a selection is locally optimal (Tarzanagh et al.,
    2023, Definition 2): for every sample i, the score gamma_it = y_i nu . x_it
    of the selected token exceeds that of each of its support tokens (those
    whose margin constraint is active at the max-margin solution: multiplier
    > ``tol`` times the largest). Returns whether it holds, how many support
    constraints were checked, and the violations (sample, token, the score gap
    gamma_{i alpha_i} - gamma_it <= 0)."""
    X = np.asarray(X, dtype=np.float64)
    n, T, _ = X.shape
    gamma = np.asarray(y, dtype=np.float64)[:, None] * (X @ np.asarray(nu, dtype=np.float64))  # (n, T)
    alpha = np.asarray(alpha, dtype=np.int64)
    keep = np.ones((n, T), dtype=bool)
    keep[np.arange(n), alpha] = False
    rows = np.argwhere(keep)  # (i, t) of each constraint, in constraint_rows' order
    active = dual > tol * max(float(dual.max()), 0.0) if dual.size else np.zeros(0, dtype=bool)
    gaps = gamma[np.arange(n), alpha][rows[:, 0]] - gamma[rows[:, 0], rows[:, 1]]
    bad = active & ~(gaps > 0.0)
    return {
        "locally_optimal": bool(not bad.any()),
        "support_checked": int(active.sum()),
        "violations": [[int(i), int(t), float(g)] for (i, t), g in zip(rows[bad], gaps[bad])][:20],
        "n_violations": int(bad.sum()),
    }


def _polish(G: np.ndarray, support: np.ndarray):
    """The min-norm v with G_S v = 1 on the active set S: v = G_S^T lam_S with
    (G_S G_S^T) lam_S = 1 (least squares when G_S is rank deficient)."""
    if support.size == 0:
        return None, None
    GS = G[support]
    lam, *_ = np.linalg.lstsq(GS @ GS.T, np.ones(support.size), rcond=None)
    return GS.T @ lam, lam


def kkt_residual(G: np.ndarray, v: np.ndarray, dual: np.ndarray) -> float:
    """The largest relative violation of the KKT conditions of min |v| s.t. G v >= 1:
    primal feasibility 1 - G v <= 0, stationarity v = G^T dual, complementary
    slackness dual (G v - 1) = 0, dual feasibility dual >= 0."""
    gv = G @ v
    vn = max(float(np.linalg.norm(v)), 1e-300)
    primal = max(0.0, float(np.max(1.0 - gv)))
    station = float(np.linalg.norm(v - G.T @ dual)) / vn
    slack = float(np.max(np.abs(dual * (gv - 1.0)))) * float(np.abs(G).max()) / vn if dual.size else 0.0
    dual_neg = max(0.0, float(-dual.min())) if dual.size else 0.0
    return max(primal, station, slack, dual_neg)


class LimitWatch:
    """Keeps q (engine coordinates) and p at every log point, and after the run
    solves the att-SVM of the final selection, adds ``mm_cos`` to the
    trajectory and returns the "limit" section of the result (SPEC §13)."""

    def __init__(self, problem: Problem):
        self.pb = problem
        self.q: list[np.ndarray] = []
        self.p: list[np.ndarray] = []

    def __call__(self, state: dict) -> None:
        self.q.append(state_q(state))
        self.p.append(state["p"].copy())

    def finish(self, cfg: Config, traj: Any, pop: Population | None) -> dict:
        pb, st = self.pb, traj.state
        n = pb.y.size
        X = pb.X2.reshape(n, pb.T, -1)
        alpha = traj.arrays["selected"][-1]
        train = cfg.train_set
        variable = "W" if "W" in train and "p" not in train else "q" if "W" in train else "p"
        q_only = variable != "p"  # the logit direction q is the variable (or W, through q); else p, W fixed
        if variable == "W":  # W alone, p fixed: the W-SVM (its W_mm = q_mm p^T / |p|^2)
            sol = w_svm(X, alpha, st["p"])
        else:
            sol = att_svm(X, alpha) if q_only else att_svm(X, alpha, M=st["W"])
        out = {
            "selection": alpha.tolist(),
            "variable": variable,
            "feasible": sol.feasible,
            "message": sol.message,
        }
        if not sol.feasible:
            traj.arrays["mm_cos"] = np.full(len(self.q), np.nan)
            return out
        U = pb.U_perp
        if q_only:
            q_mm, p_mm = (sol.extra["q_mm"] if variable == "W" else sol.v), None
            qq_mm = float(q_mm @ q_mm)
        else:
            p_mm = sol.v
            q_mm = st["W"] @ p_mm
            qq_mm = pb.q_norm2(st["W"], p_mm)[1]
        # with p fixed, W(t) - W(0) = u(t) p^T, so its cosine to W_mm is that of q(t) - q(0) to q_mm
        q_ref = self.q[0] if variable == "W" else 0.0
        U = None if variable == "W" else U  # p fixed: q's part outside span(Q) is in q(0) and cancels
        cos = []
        for q, p in zip(self.q, self.p):
            q = q - q_ref
            dot = float(q @ q_mm)
            if p_mm is not None and U is not None:  # the parts outside span(Q): H p . H p_mm
                dot += float((U @ p) @ (U @ p_mm))
            norm_q = math.sqrt(
                max(float(q @ q) + (float(np.sum((U @ p) ** 2)) if U is not None else 0.0), 0.0)
            )
            cos.append(dot / (norm_q * math.sqrt(qq_mm)) if norm_q > 0 else np.nan)
        traj.arrays["mm_cos"] = np.asarray(cos)
        if variable == "W":
            out["W_norm"] = float(np.linalg.norm(sol.v))  # |W_mm|_F = |q_mm| / |p|
        dual_q = sol.dual * float(st["p"] @ st["p"]) if variable == "W" else sol.dual
        out["certificate"] = {"kkt": sol.kkt, **local_optimality(X, alpha, pb.y, st["nu"], dual_q)}
        out.update(norm=math.sqrt(qq_mm), kkt=sol.kkt, support=sol.support, cos=cos[-1])
        if pop is None:
            out["population"] = "no population metrics for this data (see data.population)"
            return out
        nu = st["nu"]
        scalars = (
            q_mm @ pb.mu_pos,
            q_mm @ pb.mu_neg,
            q_mm @ nu,
            qq_mm,
            nu @ pb.mu_pos,
            nu @ pb.mu_neg,
            nu @ nu,
        )
        hard = pop.hard_limit(*scalars)
        out.update(hard)
        out["gen_never"] = hard["relevant_prob"] < cfg.gen_score
        return out
