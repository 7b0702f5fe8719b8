"""The attention model's problem in engine coordinates, and how its states are measured."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ... import registry
from ...config import Config
from ...init import draw_W0
from ...runtime.threads import in_background
from ...runtime.workspace import PROCESS
from .plan import n_log_points
from .population import state_scalars
from .steppers import FUSED, FlowField, ModelArrays, SegmentXW, make_segment, outputs, state_q

if TYPE_CHECKING:  # names in annotations only
    from .flow import GradientFlow
    from .population import Population
    from .steppers import Segment


@dataclass
class Problem:
    """Everything the GD driver and the metrics need, in engine coordinates.

    Attributes
    ----------
    X2 : (n*T, k) training tokens.   y : (n,) observed labels.   T : tokens per sample.
    W0 : (k, r), p0 : (r,), nu0 : (k,) initial state.
    mu_pos, mu_neg : (k,) class signals in engine coordinates (None if unknown).
    U_perp : (rho, r) with ||q_perp||^2 = ||U_perp p||^2 (None: q lies in span(Q)).
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
    U_perp: np.ndarray | None = None
    X2_test: np.ndarray | None = None
    O_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    Q: np.ndarray | None = None
    R: np.ndarray | None = None
    W0_source: object = None  # W(0) itself, or (its W0Init, the generator) to redraw it
    info: dict = field(default_factory=dict)
    _W0R: np.ndarray | None = field(default=None, repr=False)  # W(0) R, (d, r), once lift_q needs it
    # the X W form's K = X X^T, its factor and B(0), made by the run's stepper, read by its twin's
    _xw: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        # its own engine facts: a cached setup's dict is read by every run built from it, and
        # building a stepper writes its facts here (a GD run's "gd_state" went into the
        # record of a later gradient flow of the same setup)
        self.info = dict(self.info)

    @property
    def k(self) -> int:
        return self.X2.shape[1]

    @property
    def r(self) -> int:
        return self.p0.size

    def q_norm2(
        self, W: np.ndarray | None, p: np.ndarray, q: np.ndarray | None = None
    ) -> tuple[np.ndarray, float]:
        """q in engine coordinates (Q^T q; W p unless given) and the full ||q||^2."""
        qk = W @ p if q is None else q
        qq = float(qk @ qk)
        if self.U_perp is not None:
            h = self.U_perp @ p
            qq += float(h @ h)
        return qk, qq

    def stepper(self, cfg: Config, rel: np.ndarray, y: np.ndarray | None = None) -> Segment | GradientFlow:
        """The model stepper of this problem: GD steps (in the X W form when
        log points are far apart, see :func:`.steppers.make_segment`),
        or the gradient flow; trained on the labels ``y`` (default: the
        problem's observed labels)."""
        y = self.y if y is None else y
        arrays = ModelArrays(
            self.X2,
            y,
            self.W0,
            self.p0,
            self.nu0,
            self.T,
            cfg.lr,
            cfg.train_set,
            cfg.loss,
            rel,
            cfg.attention,
        )
        if cfg.integrator == "gd":
            seg = make_segment(
                arrays,
                log_gap=cfg.steps
                / max(1, n_log_points(cfg.steps, cfg.log_scale, cfg.log_every, cfg.log_points) - 1),
                optimizer=cfg.optimizer if cfg.optimizer in FUSED else registry.make_optimizer(cfg),
                shared=self._xw,
            )
            self.info["gd_state"] = "X W (n*T x r)" if isinstance(seg, SegmentXW) else "W (k x r)"
            return seg
        from .flow import GradientFlow  # lazy: start-up of GD runs (a flow needs SciPy's integrators)

        return GradientFlow(FlowField(arrays), y.size, cfg.lr, cfg.flow_method, cfg.flow_rtol, cfg.flow_atol)

    def evaluator(self, cfg: Config, pop: Population | None) -> StateEvaluator | None:
        """Test-set and population metrics of a state (:class:`StateEvaluator`),
        or None when there are neither."""
        if self.X2_test is None and pop is None:
            return None
        return StateEvaluator(self, pop, cfg.loss, cfg.attention)

    def objective(self, cfg: Config, state: Mapping[str, np.ndarray], y: np.ndarray) -> float:
        """The mean training loss of ``state`` (engine coordinates) by the NumPy reference: the
        logits of the training tokens lie in span(Q), so the engine's tokens give them exactly."""
        from .reference import loss  # lazy: check-grad alone reads the reference

        X = self.X2.reshape(y.size, self.T, -1)
        return loss(X, y, state["W"], state["p"], state["nu"], cfg.loss, cfg.attention)

    def W0_full(self) -> np.ndarray:
        """The d x d W(0) (redrawn from its stream when it was not kept)."""
        if isinstance(self.W0_source, np.ndarray):
            return self.W0_source
        init, rng = self.W0_source
        return draw_W0(
            init, copy.deepcopy(rng), self.Q.shape[0]
        )  # never from kept draws: a copy of the stream

    def dense_view(self) -> Problem:
        """This problem in the d coordinates of the tokens (the dense engine's own): for the
        reduced engine the tokens X2 Q^T, the initial state lifted and the signals Q mu
        (the same numbers to float64 rounding; no test set). For a second stepper that
        needs d-dimensional arrays (the precision twin)."""
        if self.engine == "dense":
            return self
        if self.engine != "reduced":
            raise ValueError(f"the {self.engine} engine has no d-dimensional tokens")
        Q, W0 = self.Q, self.W0_full()  # the initial state lifted: W~ = W~(0) adds nothing to W(0)
        self._W0R = W0 @ self.R  # for lift_q, while W(0) is at hand
        return Problem(
            engine="dense",
            reason=self.reason,
            X2=self.X2 @ Q.T,
            y=self.y,
            T=self.T,
            W0=W0,
            p0=self.R @ self.p0,
            nu0=Q @ self.nu0,
            mu_pos=None if self.mu_pos is None else Q @ self.mu_pos,
            mu_neg=None if self.mu_neg is None else Q @ self.mu_neg,
        )

    def lift_q(self, q: np.ndarray, p: np.ndarray) -> np.ndarray:
        """q = W p in the d coordinates of the tokens, from the engine coordinates' q = W~ p~
        and p~: W(0) R p~ + Q (q - W~(0) p~) (dense engine: q itself). W(0) R is formed once
        (one W(0) pass) and kept: a watch of every log point pays O(d r) each, not a redraw
        of W(0) and a d x d lift."""
        if self.engine == "dense":
            return q
        if self.engine == "implicit":
            raise ValueError("the implicit engine has no d-dimensional state to lift to")
        if self._W0R is None:
            self._W0R = self.W0_full() @ self.R
        return self._W0R @ p + self.Q @ (q - self.W0 @ p)

    def lift(self, W: np.ndarray, p: np.ndarray, nu: np.ndarray) -> dict[str, np.ndarray]:
        """Full-space W, p, q = W p and nu (dense engine: the arrays themselves)."""
        if self.engine == "dense":
            return {"W": W, "p": p, "q": W @ p, "nu": nu}
        if self.engine == "implicit":
            raise ValueError("the implicit engine has no d-dimensional state to lift to")
        Q, R, W0 = self.Q, self.R, self.W0_full()
        dW = W - self.W0
        return {
            "W": W0 + Q @ dW @ R.T,
            "p": R @ p,
            "q": W0 @ (R @ p) + Q @ (dW @ p),
            "nu": Q @ nu,
        }


class StateEvaluator:
    """Test-set and population metrics of a state of ``problem`` (an :class:`attnsim.models.base.Evaluator`).

    Calling it measures the state now; :meth:`defer` returns a job whose
    ``result()`` gives the same dict, the population part on the background
    thread (:func:`attnsim.runtime.threads.in_background`) from the state's
    scalars, so the caller may move the state on at once."""

    def __init__(self, problem: Problem, pop: Population | None, loss: str, attention: str = "softmax"):
        self.pb, self.pop, self.loss, self.attention = problem, pop, loss, attention

    def _test_part(self, state) -> dict:
        pb = self.pb
        if pb.X2_test is None:
            return {}
        W, p, nu = state["W"], state["p"], state["nu"]
        return test_set_metrics(pb.X2_test, pb.O_test, pb.y_test, pb.T, W, p, nu, self.loss, self.attention)

    def _scalars(self, state) -> tuple[float, ...]:
        return state_scalars(self.pb, None, state["p"], state["nu"], q=state_q(state))

    def __call__(self, state: Mapping[str, np.ndarray]) -> dict:
        with PROCESS.evaluating():
            out = self._test_part(state)
            if self.pop is not None:
                out.update(self.pop.evaluate(*self._scalars(state)))
        return out

    def defer(self, state: Mapping[str, np.ndarray]) -> _Deferred:
        scalars = None if self.pop is None else self._scalars(state)
        job = None if self.pop is None else in_background(_quiet_call, self.pop.evaluate, scalars)
        with PROCESS.evaluating():
            now = self._test_part(state)
        return _Deferred(now, job)


class _Deferred:
    """Metrics computed now (``done``) plus those of a background job (the population's
    evaluation of the state's scalars)."""

    def __init__(self, done: dict, job):
        self.done, self.job = done, job

    def result(self) -> dict:
        return self.done if self.job is None else {**self.done, **self.job.result()}

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()


def _quiet_call(fn, args):
    """fn(*args) with overflow and invalid-value warnings off (as the driver
    runs evaluations; NumPy's error state is per thread), its time counted as evaluation."""
    with np.errstate(over="ignore", invalid="ignore"), PROCESS.evaluating():
        return fn(*args)


TEST_CHUNK = 4096  # test samples per evaluation chunk (bounds the temporary logits)


def test_set_metrics(
    X2: np.ndarray,
    outside: np.ndarray | None,
    y: np.ndarray,
    T: int,
    W: np.ndarray,
    p: np.ndarray,
    nu: np.ndarray,
    loss: str,
    attention: str = "softmax",
) -> dict[str, float]:
    """Loss and accuracy of the state (W, p, nu) on a finite test set.

    X2 : (m*T, k) test tokens in engine coordinates; outside : (m*T, r) their
    products with the part of W(0) R outside span(Q), or None; y : (m,).
    """
    m = y.size
    qk, vals = W @ p, np.empty(m)
    total = 0.0
    for lo in range(0, m, TEST_CHUNK):
        hi = min(m, lo + TEST_CHUNK)
        rows = slice(lo * T, hi * T)
        z = X2[rows] @ qk
        if outside is not None:
            z += outside[rows] @ p
        u = X2[rows] @ nu
        _, f, L = outputs(z.reshape(-1, T), u.reshape(-1, T), y[lo:hi], loss, attention)
        vals[lo:hi] = y[lo:hi] * f
        total += L * (hi - lo)
    return {"test_loss": total / m, "test_acc": float(np.mean(vals > 0))}
