"""Gradient flow as a stepper: the attention model's vector field integrated by SciPy's
explicit Runge-Kutta methods over the span of the requested steps (SPEC §5)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..base import ClassifierStepper, Observation, Outcome
from .steppers import EvaluationBudgetExceeded

if TYPE_CHECKING:  # names in annotations only
    from .steppers import FlowField


class GradientFlow(ClassifierStepper):
    """A :class:`Stepper` that follows the gradient flow d theta/dt = -grad L
    of a vector field (t = lr * step) with scipy's explicit Runge-Kutta
    methods; ``advance`` integrates over the span of the requested steps, so
    GD and flow share one driver. First-fit steps have the resolution of the
    calls to ``advance`` (the log grid).

    ``field`` provides ``pack``, ``unpack``, ``__call__``, ``observe``,
    ``extra_metrics``, ``relevant_increments`` and ``max_evals`` (see
    :class:`.steppers.FlowField`).
    """

    whole_spans = True  # each span between log points is integrated whole

    def __init__(self, field: FlowField, n: int, lr: float, method: str, rtol: float, atol: float):
        from scipy.integrate import solve_ivp  # lazy: 0.3 s of every run's start-up; only flows need it

        self._solve = solve_ivp
        self.field, self.lr = field, lr
        self.method, self.rtol, self.atol = method, rtol, atol
        self.theta = field.pack(field.W, field.p, field.nu, np.zeros(n))
        self.fit_since = np.where(field.data.y * self.observe().f > 0, 0.0, -1.0)  # real steps (refined)
        self.progress: Callable[[float], None] | None = None  # called with the step the solver reached

    def _rhs(self, t: float, theta: np.ndarray) -> np.ndarray:
        """The vector field, reporting the solver's progress every 64 evaluations."""
        if self.progress is not None and self.field.evals % 64 == 0:
            self.progress(t / self.lr)
        return self.field(t, theta)

    @property
    def S_acc(self) -> np.ndarray:
        return self.field.unpack(self.theta)[3]

    def _advance(self, step0: float, nsteps: float) -> tuple[Outcome, float]:
        """Integrate from step0 over nsteps (real numbers of steps). A sample
        whose fit changes in the span gets the exact step of the change (a root
        of its margin on the solver's dense output, from a second integration).
        An integration that stalls or fails ends the span (``detail`` says why)."""
        theta0 = self.theta
        sol = self._integrate(step0, nsteps, theta0, dense=False)
        if isinstance(sol, Outcome):
            return sol, step0
        self.theta = sol.y[:, -1]
        end = step0 + nsteps
        y = self.field.data.y
        was = self.fit_since >= 0
        fitted = y * self.observe().f > 0
        changed = np.flatnonzero(fitted & ~was)
        self.fit_since = np.where(fitted, self.fit_since, -1.0)
        if changed.size:
            again = self._integrate(step0, nsteps, theta0, dense=True)  # with its dense output
            if isinstance(again, Outcome):  # the same span failed the second time (a flow at its edge)
                return again, step0
            dense = again.sol
            for i in changed:
                self.fit_since[i] = self._last_rise(dense, i, step0, end)
        return Outcome.FINISHED, end

    def _integrate(self, step0: float, nsteps: float, theta0: np.ndarray, dense: bool):
        span = (self.lr * step0, self.lr * (step0 + nsteps))
        self.field.begin(span)
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                sol = self._solve(
                    self._rhs,
                    span,
                    theta0,
                    method=self.method,
                    rtol=self.rtol,
                    atol=self.atol,
                    dense_output=dense,
                )
        except EvaluationBudgetExceeded as exc:
            self.detail = (
                f"gradient flow stalled between steps {step0:g} and {step0 + nsteps:g} (at step "
                f"{exc.args[0] / self.lr:.4g}): {self.field.evals - self.field.span_evals} evaluations of "
                "the vector field in it; the logits are too large for the step-size control (reduce "
                f"lr={self.lr:g} or steps)"
            )
            return Outcome.STALLED
        if not sol.success or not np.all(np.isfinite(sol.y[:, -1])):
            self.detail = (
                f"diverged between steps {step0:g} and {step0 + nsteps:g}: the flow failed ({sol.message})"
            )
            return Outcome.DIVERGED
        return sol

    def _last_rise(self, dense, i: int, a: float, b: float) -> float:
        """The step in (a, b] after which sample i stays fitted: the last zero of
        its margin y_i f_i on the dense output (scanned on 64 points, then
        bisected to a relative 1e-9)."""
        from scipy.optimize import brentq  # lazy: 0.2 s of start-up, as solve_ivp above

        y = self.field.data.y[i]

        def margin(step: float) -> float:
            W, p, nu, _ = self.field.unpack(dense(self.lr * step))
            return float(y * self.field.observe(W, p, nu).f[i])

        grid = np.linspace(a, b, 65)
        vals = np.array([margin(t) for t in grid])
        neg = np.flatnonzero(vals <= 0)
        if neg.size == 0:
            return a
        lo = neg[-1]
        if lo == grid.size - 1:
            return b
        return float(brentq(margin, grid[lo], grid[lo + 1], xtol=1e-9 * max(1.0, grid[lo + 1])))

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        return self.theta.copy(), self.fit_since.copy()

    def restore(self, snap: tuple[np.ndarray, np.ndarray]) -> None:
        self.theta, self.fit_since = snap[0].copy(), snap[1].copy()

    def state(self) -> dict[str, np.ndarray]:
        W, p, nu, _ = self.field.unpack(self.theta)
        return {"W": W, "p": p, "nu": nu}

    def observe(self) -> Observation:
        return self.field.observe(**self.state())

    def extra_metrics(self) -> dict[str, float]:
        return self.field.extra_metrics(**self.state())

    def relevant_increments(self, s: np.ndarray) -> np.ndarray:
        return self.field.relevant_increments(s)
