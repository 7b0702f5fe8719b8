"""Gradient flow on the population risk (``integrator = population_flow``, SPEC §17).

The ODE of :class:`.fresh.PopulationGD` in continuous time t = lr * step, integrated
by SciPy's explicit Runge-Kutta methods (``flow_method``, ``flow_rtol``,
``flow_atol``) over each span between log points. The quadrature's gradient is a
smooth function of the state (a fixed set of quasi-random samples), so the solver's
step-size control sees the flow and not sampling noise.

State: with W trained, the frame coordinates of W (4 x 4), p and nu (24 numbers;
``batch`` is then 0 and the frame does not turn). With W = I fixed, the overlaps
(q1, q2, n1, n2) on e1, e2 and the Gram matrix G of the parts of q and nu outside
the signals (3 numbers): d(q1, q2)/dt = -g12, d(n1, n2)/dt = -gnu12 and
dG/dt = -(P H^T + H P^T) + lr sigma^2 (d - 4) / B * E[C^T C] (P the rows q_perp,
nu_perp, H their gradients; the last term, with ``batch`` = B > 0, is online SGD's
variance per unit time, the d -> infinity limit of online SGD with lr ~ 1/d in the
time d * t steps). G rather than its factor is the state: the risk depends on
|q_perp|^2 smoothly, on |q_perp| not (q starts at 0 with init_p = zeros).
"""

from __future__ import annotations

import numpy as np

from ...config import Config
from ..base import Outcome
from .fresh import FRAME, PopulationGD, psd_pair

MAX_EVALS = 200_000  # vector-field evaluations per span before the flow counts as stalled


class _Stalled(Exception):
    pass


class PopulationFlow(PopulationGD):
    """Gradient flow on the population risk in the frame (module docstring)."""

    whole_spans = True

    def __init__(self, pb, cfg: Config):
        from scipy.integrate import solve_ivp  # lazy: 0.3 s of start-up; only flows need it

        super().__init__(pb, cfg)
        self._solve = solve_ivp
        self.gram = not self.train[0]  # W fixed: the overlaps and G are the state
        self.evals = 0

    def _pack(self) -> np.ndarray:
        p, nu = self.p, self.nu
        if self.gram:
            P = np.stack([p[2:], nu[2:]])
            G = P @ P.T
            return np.array([p[0], p[1], nu[0], nu[1], G[0, 0], G[0, 1], G[1, 1]])
        return np.concatenate([self.W.ravel(), p, nu])

    def _unpack(self, theta: np.ndarray) -> None:
        """Write the state ``theta`` into W, p, nu (q on f3 alone when G is the state)."""
        if self.gram:
            L00, L10, L11 = psd_pair(np.array([[theta[4], theta[5]], [theta[5], theta[6]]]))
            self.p[:] = (theta[0], theta[1], L00, 0.0)
            self.nu[:] = (theta[2], theta[3], L10, L11)
        else:
            k = FRAME * FRAME
            self.W[:] = theta[:k].reshape(FRAME, FRAME)
            self.p[:] = theta[k : k + FRAME]
            self.nu[:] = theta[k + FRAME :]

    def _field(self, t: float, theta: np.ndarray) -> np.ndarray:
        self.evals += 1
        if self.evals > MAX_EVALS:
            raise _Stalled(t)
        if self.progress is not None and self.evals % 64 == 0:
            self.progress(t / self.lr)
        self._unpack(theta)
        L, g, gnu, stats = self._gradient(self.copies)
        if not np.isfinite(L):
            return np.full_like(theta, np.nan)
        tw, tp, tn = self.train
        g = self._project(g)
        gnu = self._project(gnu) if tn else np.zeros_like(gnu)
        if not self.gram:
            dW = -np.outer(g, self.p) if tw else np.zeros((FRAME, FRAME))
            dp = -self.W.T @ g if tp else np.zeros(FRAME)
            return np.concatenate([dW.ravel(), dp, -gnu])
        dp = -g if tp else np.zeros(FRAME)
        dnu = -gnu
        P = np.stack([self.p[2:], self.nu[2:]])
        H = np.stack([dp[2:], dnu[2:]])
        dG = P @ H.T + H @ P.T
        if self.batch:
            dG += self._variance(stats, self.lr)
        return np.array([dp[0], dp[1], dnu[0], dnu[1], dG[0, 0], dG[0, 1], dG[1, 1]])

    def _advance(self, step0: float, nsteps: float) -> tuple[int, float]:
        cfg = self.cfg
        theta0 = self._pack()
        self.evals = 0
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                sol = self._solve(
                    self._field,
                    (self.lr * step0, self.lr * (step0 + nsteps)),
                    theta0,
                    method=cfg.flow_method,
                    rtol=cfg.flow_rtol,
                    atol=cfg.flow_atol,
                )
        except _Stalled as exc:
            self._unpack(theta0)
            self.detail = (
                f"the population flow stalled between steps {step0:g} and {step0 + nsteps:g} (at step "
                f"{exc.args[0] / self.lr:.4g}): {MAX_EVALS} evaluations of its vector field"
            )
            return Outcome.STALLED, step0
        if not sol.success or not np.all(np.isfinite(sol.y[:, -1])):
            self._unpack(theta0)
            self.detail = (
                f"diverged between steps {step0:g} and {step0 + nsteps:g}: the flow failed ({sol.message})"
            )
            return Outcome.DIVERGED, step0
        self._unpack(sol.y[:, -1])
        return Outcome.FINISHED, step0 + nsteps
