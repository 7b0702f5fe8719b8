"""Single-location regression as attnsim trains it (SPEC §20): the teacher and the initial k, v
drawn in d dimensions, the three steppers (projected GD on the population risk, on n samples, on a
fresh batch each step), and the evaluator of the population risk and a finite test set.

The population stepper (``integrator = population``, the authors' PGD) keeps k and v as
coefficients in the basis E = (k(0), v(0), k*, v*): every gradient of the population risk lies in
span(k, v, k*, v*) (:func:`.reference.pgd_overlaps`), so k and v never leave span(E), and a step
costs O(1) at any d. The five overlaps follow from the 4 x 4 Gram matrix of E; k and v are lifted
to d dimensions (E times the coefficients) only for a finite test set and the final state.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...runtime.threads import Done
from ..base import Outcome, Stepper
from . import kernels
from .reference import draw, overlaps, predict

METRIC_NAMES = ("k_kstar", "v_vstar", "v_kstar", "vstar_k", "k_v")  # kappa, nu, theta, eta, rho


def scale_at(cfg: Any, step: float) -> float:
    """lambda at a step: attention_scale, or attention_scale / (1 + 1e-4 step) with the schedule
    (the authors' lambd_value; the step's index counts from 0)."""
    lam0 = cfg.attention_scale
    return lam0 / (1.0 + 1e-4 * step) if cfg.scale_schedule else lam0


def named(o: np.ndarray) -> dict[str, float]:
    """The overlaps under their metric names, and the distance to the authors' manifold
    sqrt(theta^2 + eta^2 + rho^2) (zero on it)."""
    out = {name: float(v) for name, v in zip(METRIC_NAMES, o)}
    out["manifold_distance"] = float(math.sqrt(o[2] ** 2 + o[3] ** 2 + o[4] ** 2))
    return out


class _Sphere(Stepper):
    """What the three steppers share: k, v on the sphere (in d dimensions, or as coefficients),
    k* and v*, the overlaps as metrics."""

    k_star: np.ndarray
    v_star: np.ndarray

    def overlaps(self) -> np.ndarray:
        k, v = self.kv()
        return overlaps(k, v, self.k_star, self.v_star)

    def kv(self) -> tuple[np.ndarray, np.ndarray]:
        s = self.state()
        return s["k"], s["v"]

    def final_state(self) -> dict[str, np.ndarray]:
        return {k: np.array(v, copy=True) for k, v in self.state().items()}

    def extra_metrics(self) -> dict[str, float]:
        return named(self.overlaps())


class PopulationStepper(_Sphere):
    """Projected GD on the closed-form population risk of the erf predictor, in coefficients of
    E = (k(0), v(0), k*, v*) (the module's note): one :func:`.kernels.pgd_coefficients` call per span."""

    def __init__(
        self, cfg: Any, k0: np.ndarray, v0: np.ndarray, k_star: np.ndarray, v_star: np.ndarray
    ) -> None:
        self.cfg, self.k_star, self.v_star = cfg, k_star, v_star
        self.E = np.stack([k0, v0, k_star, v_star])  # (4, d)
        self.G = self.E @ self.E.T
        self.c = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])  # k, v in the basis E
        self.scale = np.array(scale_at(cfg, 0))

    def _advance(self, step0: float, nsteps: float) -> tuple[int, float]:
        c = self.cfg
        status, reached = kernels.pgd_coefficients(
            self.c,
            self.G,
            step0,
            nsteps,
            c.lr,
            c.attention_scale,
            c.scale_schedule,
            c.gamma,
            c.d,
            c.T,
        )
        self.scale[()] = scale_at(c, reached)
        return (Outcome.DIVERGED if status else Outcome.FINISHED), reached

    def overlaps(self) -> np.ndarray:
        return kernels.coefficient_overlaps(self.c, self.G)

    def state(self) -> dict[str, np.ndarray]:
        """k and v lifted to d dimensions (copies: O(d)) and the current lambda."""
        return {"k": self.c[0] @ self.E, "v": self.c[1] @ self.E, "scale": self.scale}

    def snapshot(self) -> Any:
        return self.c.copy(), self.scale.copy()

    def restore(self, snap: Any) -> None:
        self.c[...], self.scale[...] = snap


class SampleStepper(_Sphere):
    """Projected GD on n samples (``gd``), or on a fresh batch drawn every step (``online``, the
    authors' SGD): the mean squared loss's gradient in d dimensions by :class:`.kernels.SampleWork`,
    its tangent part applied, k and v renormalized."""

    def __init__(self, cfg: Any, k0, v0, k_star, v_star, X, y, rng: np.random.Generator | None) -> None:
        self.cfg, self.k_star, self.v_star = cfg, k_star, v_star
        self.k, self.v = np.array(k0, dtype=np.float64), np.array(v0, dtype=np.float64)
        self.X, self.y, self.rng = X, y, rng  # rng: the online batches' stream (None: the training set)
        self.work = kernels.SampleWork(cfg.T, cfg.d)
        self.code = kernels.ATTENTIONS[cfg.attention]
        self.scale = np.array(scale_at(cfg, 0))
        self.last_loss = math.nan

    def _advance(self, step0: float, nsteps: float) -> tuple[int, float]:
        c = self.cfg
        for j in range(int(nsteps)):
            step = int(step0) + j
            if self.rng is not None:
                batch = c.batch or c.n
                self.X, self.y = draw(batch, c.T, self.k_star, self.v_star, c.gamma, c.label_sd, self.rng)
            loss, gk, gv = self.work.loss_grad(self.X, self.y, self.k, self.v, scale_at(c, step), self.code)
            if not (math.isfinite(loss) and np.isfinite(gk).all() and np.isfinite(gv).all()):
                return Outcome.DIVERGED, step
            self.last_loss = loss
            for x, g in ((self.k, gk), (self.v, gv)):
                x -= c.lr * (g - (x @ g) * x)
                x /= np.linalg.norm(x)
        self.scale[()] = scale_at(c, int(step0) + int(nsteps))
        return Outcome.FINISHED, int(step0) + int(nsteps)

    def state(self) -> dict[str, np.ndarray]:
        return {"k": self.k, "v": self.v, "scale": self.scale}

    def extra_metrics(self) -> dict[str, float]:
        out = named(self.overlaps())
        if self.rng is None:  # the training set's mean squared error at this state
            loss, _, _ = self.work.loss_grad(self.X, self.y, self.k, self.v, float(self.scale), self.code)
            out["train_loss"] = float(loss)
        elif math.isfinite(self.last_loss):  # online: the last batch's, before its step
            out["train_loss"] = float(self.last_loss)
        return out

    def _snapshot_extra(self) -> Any:
        return None if self.rng is None else self.rng.bit_generator.state

    def _restore_extra(self, extra: Any) -> None:
        if extra is not None:
            self.rng.bit_generator.state = extra


class Population:
    """The population risk E[(T(X) - y)^2] at overlaps: the closed form for erf attention (its
    standard error 0), else the mean over ``points`` draws of the tokens' few Gaussian coordinates
    that matter (x_1.k, x_1.v, x_1.v* and x_l.k, x_l.v), the same draws at every state (common random
    numbers), with its standard error."""

    def __init__(self, cfg: Any, rng: np.random.Generator) -> None:
        self.cfg = cfg
        if cfg.attention == "erf":
            self.method = "the closed form of the erf predictor's risk in the five overlaps (exact)"
            self.z = None
            return
        n, L = cfg.pop_points, cfg.T
        self.method = (
            f"Monte Carlo over {n} draws of the tokens' coordinates along k, v, k*, v* (the same draws "
            "at every state); the standard error is the draws' sd / sqrt(pop_points)"
        )
        self.z = rng.standard_normal((n, 3))  # token 1: (a, b, c)
        self.zl = rng.standard_normal((n, max(L - 1, 0), 2))  # the other tokens: (a, b)
        self.xi = rng.standard_normal(n)  # the label noise

    def __call__(self, o: np.ndarray, lam: float) -> tuple[float, float]:
        c = self.cfg
        if self.z is None:
            r, _ = kernels.risk_and_partials(o, lam, c.gamma, c.d, c.T, c.label_sd)
            return float(r), 0.0
        kappa, nu, theta, eta, rho = o
        S = np.array([[1.0, rho, eta], [rho, 1.0, nu], [eta, nu, 1.0]])
        w1 = self.z @ _root(S).T
        w2 = self.zl @ _root(S[:2, :2]).T
        h = math.sqrt(c.d / 2.0)
        A = np.concatenate([(h * kappa + c.gamma * w1[:, 0])[:, None], w2[..., 0]], axis=1)
        B = np.concatenate([(h * theta + c.gamma * w1[:, 1])[:, None], w2[..., 1]], axis=1)
        from .reference import weights  # lazy: a module's name clash with this method's argument

        T = (weights(lam * A, c.attention) * B).sum(axis=1)
        e = (T - c.gamma * w1[:, 2] - c.label_sd * self.xi) ** 2
        return float(e.mean()), float(e.std(ddof=1) / math.sqrt(e.size))


def _root(S: np.ndarray) -> np.ndarray:
    """A square root R of a correlation matrix (R R^T = S), by eigenvalues clipped at 0 (S may be
    singular: rho = 1, say)."""
    w, U = np.linalg.eigh(S)
    return U * np.sqrt(np.clip(w, 0.0, None))


class Evaluator:
    """The population risk (and its standard error) and a finite test set's mean squared error
    (and its standard error) at a state."""

    def __init__(self, cfg: Any, pop: Population, stepper_kv, test: tuple | None) -> None:
        self.cfg, self.pop, self.test = cfg, pop, test
        self.k_star, self.v_star = stepper_kv

    def __call__(self, state: dict) -> dict[str, float]:
        k, v = state["k"], state["v"]
        o = overlaps(k, v, self.k_star, self.v_star)
        lam = float(state["scale"])
        risk, se = self.pop(o, lam)
        out = {"risk": risk, "risk_se": se}
        if self.test is not None:
            X, y = self.test
            e = (predict(X, k, v, lam, self.cfg.attention) - y) ** 2
            out.update(test_risk=float(e.mean()), test_risk_se=float(e.std(ddof=1) / math.sqrt(e.size)))
        return out

    def defer(self, state: dict) -> Done:
        return Done(self(state))
