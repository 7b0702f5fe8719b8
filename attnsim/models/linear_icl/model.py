"""Linear attention trained in context as attnsim runs it (SPEC §21a): the pretraining data as
sufficient statistics, the ridge objective's solvers and the three steppers.

The objective L(gamma) = (1/n) |y - F gamma|^2 + (lambda/d) |gamma|^2 (gamma = vec Gamma, F's rows
x_q (x) h) is quadratic: grad L = A gamma - b with A = (2/n) F^T F + (2 lambda/d) I and
b = (2/n) F^T y. So

- GD from gamma_0 is gamma_t = gamma_0 - V phi_t(Lambda) V^T (A gamma_0 - b), phi_t(l) =
  (1 - (1 - lr l)^t) / l, and the gradient flow the same with phi_t(l) = (1 - exp(-l t)) / l,
  t = lr * step, in the eigenbasis A = V Lambda V^T: exact at every step, no step is taken
  (:class:`ClosedForm`; A is p x p with p = d (d + 1), formed once from F in row blocks, O(n p^2),
  its eigenvalues O(p^3): d <= 64);
- larger d: GD steps, each two products of the (n x d) queries with (d x (d + 1)) matrices
  (:class:`Matvec`: A gamma never forms A), and the ridge endpoint A^-1 b by conjugate gradients
  preconditioned with the Kronecker product C_x (x) C_h of the queries' and the h's second
  moments (x_q is independent of h, so E F^T F / n = C_x (x) C_h): about 25 iterations to 1e-12.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.sparse.linalg import LinearOperator, cg

from ..base import Outcome, Stepper
from .reference import error

EIG_MAX = 4500  # p = d (d + 1) up to which A is formed and diagonalized (d <= 66)
BLOCK_ROWS = 2048  # rows of F formed at a time when A is built


class Matvec:
    """The objective's products on the data's statistics x_q (n, d), h (n, d + 1), y (n,)."""

    def __init__(self, xq: np.ndarray, h: np.ndarray, y: np.ndarray, ridge: float) -> None:
        self.xq, self.h, self.y, self.ridge = xq, h, y, ridge
        self.n, self.d = xq.shape
        self.p = self.d * (self.d + 1)
        self.b = 2.0 / self.n * ((xq.T * y) @ h)

    def predict(self, G: np.ndarray) -> np.ndarray:
        return np.einsum("nd,nd->n", self.xq @ G, self.h)

    def hess(self, G: np.ndarray) -> np.ndarray:
        """A Gamma, as a d x (d + 1) matrix."""
        r = self.predict(G)
        return 2.0 / self.n * ((self.xq.T * r) @ self.h) + 2.0 * self.ridge / self.d * G

    def train_loss(self, G: np.ndarray) -> float:
        return float(np.mean((self.y - self.predict(G)) ** 2))

    def ridge_solution(self, rtol: float = 1e-12, maxiter: int = 5000) -> tuple[np.ndarray, int, bool]:
        """A^-1 b by preconditioned conjugate gradients: (Gamma*, iterations, converged)."""
        d, p = self.d, self.p
        Cx, Ch = self.xq.T @ self.xq / self.n, self.h.T @ self.h / self.n
        dx, Ux = np.linalg.eigh(Cx)
        dh, Uh = np.linalg.eigh(Ch)
        den = 2.0 * np.outer(dx, dh) + 2.0 * self.ridge / d
        shape = (d, d + 1)
        op = LinearOperator((p, p), matvec=lambda v: self.hess(v.reshape(shape)).ravel(), dtype=float)
        pre = LinearOperator(
            (p, p), matvec=lambda v: (Ux @ ((Ux.T @ v.reshape(shape) @ Uh) / den) @ Uh.T).ravel(), dtype=float
        )
        count = [0]
        x0 = pre.matvec(self.b.ravel())
        sol, info = cg(op, self.b.ravel(), x0=x0, M=pre, rtol=rtol, atol=0.0, maxiter=maxiter,
                       callback=lambda _: count.__setitem__(0, count[0] + 1))  # fmt: skip
        return sol.reshape(shape), count[0], info == 0


class ClosedForm:
    """A = V Lambda V^T and V^T b, for GD and the flow in closed form (the module's note)."""

    def __init__(self, mv: Matvec) -> None:
        n, d, p = mv.n, mv.d, mv.p
        A = np.zeros((p, p))
        for lo in range(0, n, BLOCK_ROWS):
            hi = min(n, lo + BLOCK_ROWS)
            F = (mv.xq[lo:hi, :, None] * mv.h[lo:hi, None, :]).reshape(hi - lo, p)
            A += F.T @ F
        A *= 2.0 / n
        A[np.diag_indices(p)] += 2.0 * mv.ridge / d
        self.lam, self.V = np.linalg.eigh(A)
        self.Vb = self.V.T @ mv.b.ravel()

    def path(self, gamma0: np.ndarray, s: float, lr: float, flow: bool) -> np.ndarray:
        """gamma after s GD steps (or flow time lr s): gamma0 - V phi (Lambda V^T gamma0 - V^T b)."""
        c = self.lam * (self.V.T @ gamma0) - self.Vb
        lam = self.lam
        small = np.abs(lam) < 1e-300
        safe = np.where(small, 1.0, lam)
        if flow:
            phi = np.where(small, lr * s, -np.expm1(-safe * lr * s) / safe)
        else:
            base = 1.0 - lr * lam
            with np.errstate(over="ignore"):  # an unstable lr: the path overflows, and the stepper says so
                decay = np.power(np.abs(base), s)
            odd = float(s) % 2.0 == 1.0
            decay = np.where((base < 0) & odd, -decay, decay)
            phi = np.where(small, lr * s, (1.0 - decay) / safe)
        return gamma0 - self.V @ (phi * c)


class _Gamma(Stepper):
    """What the three steppers share: Gamma, its errors and the training loss as metrics."""

    def __init__(self, problem: Any, cfg: Any) -> None:
        self.problem, self.cfg = problem, cfg
        self.G = np.array(problem.gamma0, copy=True)

    def state(self) -> dict[str, np.ndarray]:
        return {"Gamma": self.G}

    def extra_metrics(self) -> dict[str, float]:
        p, G = self.problem, self.G
        icl = error(G, p.alpha_ell, p.mu_icl, p.R_icl, self.cfg.noise_var)
        idg = error(G, p.alpha_ell, p.mu_idg, p.R_idg, self.cfg.noise_var)
        return {"e_icl": icl, "e_idg": idg, "g_task": icl - idg, "train_loss": p.mv.train_loss(G),
                "gamma_norm": float(np.linalg.norm(G))}  # fmt: skip


class PathStepper(_Gamma):
    """GD or the gradient flow in closed form: an advance evaluates the path at the step reached."""

    whole_spans = True

    def __init__(self, problem: Any, cfg: Any) -> None:
        super().__init__(problem, cfg)
        self.flow = cfg.integrator == "flow"
        self.cf = problem.closed_form()
        self.g0 = self.G.ravel().copy()

    def _advance(self, step0: float, nsteps: float) -> tuple[int, float]:
        reached = step0 + nsteps
        g = self.cf.path(self.g0, reached, self.cfg.lr, self.flow)
        if not np.isfinite(g).all() or np.abs(g).max() > 1e150:
            lam_max = float(self.cf.lam.max())
            self.detail = (
                f"diverged by step {reached:g}: GD with lr={self.cfg.lr:g} is unstable, the objective's "
                f"largest curvature is {lam_max:.4g} (GD is stable for lr < {2.0 / lam_max:.4g})"
            )
            return Outcome.DIVERGED, step0
        self.G[...] = g.reshape(self.G.shape)
        if self.progress is not None:
            self.progress(reached)
        return Outcome.FINISHED, reached


class StepGD(_Gamma):
    """GD step by step (d too large for the closed form): Gamma -= lr (A Gamma - b)."""

    def _advance(self, step0: float, nsteps: float) -> tuple[int, float]:
        mv, lr = self.problem.mv, self.cfg.lr
        for j in range(int(nsteps)):
            self.G -= lr * (mv.hess(self.G) - mv.b)
            if not np.isfinite(self.G).all():
                return Outcome.DIVERGED, int(step0) + j
        return Outcome.FINISHED, int(step0) + int(nsteps)


class RidgeStepper(_Gamma):
    """The ridge endpoint A^-1 b, reached by the first advance (``integrator=ridge``)."""

    detail = ""

    def _advance(self, step0: float, nsteps: float) -> tuple[int, float]:
        if nsteps > 0:
            G, ok = self.problem.ridge_solution()
            if not ok:
                self.detail = "the ridge endpoint's conjugate gradients did not converge to 1e-12"
                return Outcome.STALLED, step0
            self.G[...] = G
        return Outcome.FINISHED, step0 + nsteps
