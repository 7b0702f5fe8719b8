"""Positional and semantic attention as attnsim trains it (SPEC §18): the data drawn in chunks
into the tokens and their per-sample constants, the stepper (the fused kernel's gradient handed
to the plug-in optimizer: torch SGD's weight decay, or AdamW), the population risk and the
finite test set, the recorder of the model's metrics and the learned linear baseline.

The population risk. Given Q, the error of a sample depends on the noise tokens only through
their components z_l in the span of 1, the columns of Q and those of Q* (k <= 1 + 2r
dimensions, an orthonormal basis B); the rest, xi_perp, is independent of z and enters
|Y_hat - Y|^2 = |S P + (S - M) xi|^2 only as |(S - M) xi_perp|^2, whose mean given z is
sigma^2 (d - k) |S - M|_F^2. So E|Y_hat - Y|^2 = E_z[ sum_l |c_l a + ((S - M) z)_l|^2
+ sigma^2 (d - k) |S - M|_F^2 ] with a = B^T 1/sqrt(d), c = S s: an expectation over T k
Gaussians, estimated by the mean over ``pop_points`` draws with its standard error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...runtime.threads import Done
from ..base import Outcome, Stepper
from . import kernels
from .reference import positions, row_softmax, signs, teacher

CHUNK_FLOATS = 2**22  # floats of noise drawn at a time (32 MiB): the data's memory is its tokens
LINEAR = {
    "lr": 0.5,
    "steps": 200,
    "weight_decay": 1e-4,
    "last": 5,
}  # the published linear baseline's protocol


@dataclass
class Tokens:
    """Samples of the model: tokens X = p + xi (n, T, d) and the per-sample constants the kernels
    read (K = X X^T, C = Y X^T, yy = |Y|^2), with the sums the linear baseline needs
    (sum xi xi^T and sum Y xi^T, T x T)."""

    X: np.ndarray
    K: np.ndarray
    C: np.ndarray
    yy: np.ndarray
    xixi: np.ndarray
    yxi: np.ndarray


def draw(n: int, cfg: Any, Q_star: np.ndarray, rng: np.random.Generator) -> Tokens:
    """``n`` samples, their noise drawn in chunks from ``rng`` (the same numbers whatever the chunk)."""
    T, d = cfg.T, cfg.d
    A = np.asarray(cfg.teacher_A, dtype=np.float64)
    P = positions(T, d)
    X = np.empty((n, T, d))
    K, C, yy = np.empty((n, T, T)), np.empty((n, T, T)), np.empty(n)
    xixi, yxi = np.zeros((T, T)), np.zeros((T, T))
    step = max(1, CHUNK_FLOATS // (T * d))
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        xi = rng.standard_normal((hi - lo, T, d))
        xi *= cfg.sigma
        Y = teacher(xi, Q_star, cfg.omega, A)
        X[lo:hi] = xi + P
        Xt = np.swapaxes(X[lo:hi], 1, 2)
        K[lo:hi] = X[lo:hi] @ Xt
        C[lo:hi] = Y @ Xt
        yy[lo:hi] = np.einsum("itd,itd->i", Y, Y)
        xit = np.swapaxes(xi, 1, 2)
        xixi += (xi @ xit).sum(axis=0)
        yxi += (Y @ xit).sum(axis=0)
    return Tokens(X, K, C, yy, xixi, yxi)


def initial_Q(cfg: Any, Q_star: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Q(0): Q* (semantic), every entry 1/sqrt(d) (positional) or 0.1 N(0, 1) (random), as published."""
    if cfg.init == "semantic":
        return Q_star.copy()
    if cfg.init == "positional":
        return np.full((cfg.d, cfg.rank), 1.0 / math.sqrt(cfg.d))
    return 0.1 * rng.standard_normal((cfg.d, cfg.rank))


def overlaps(Q: np.ndarray, Q_star: np.ndarray) -> dict[str, float]:
    """The paper's overlaps: magnetization |1^T Q| / d, theta = |Q*^T Q| / d (norms over the r columns)."""
    d = Q.shape[0]
    return {
        "magnetization": float(np.linalg.norm(Q.sum(axis=0)) / d),
        "theta": float(np.linalg.norm(Q_star.T @ Q) / d),
        "q_norm": float(np.linalg.norm(Q)),
    }


class Population:
    """E|Y_hat - Y|^2 / (2 d) at a state, by the mean over ``points`` draws of the T k Gaussian
    components in span(1, Q, Q*) with the rest integrated exactly (the module's note); the same
    draws at every state (common random numbers), so a trajectory is smooth."""

    method = (
        "Monte Carlo over the noise components in span(1, Q, Q*) (pop_points draws), the other d - k "
        "integrated exactly; the standard error is the draws' sd / sqrt(pop_points)"
    )

    def __init__(self, cfg: Any, Q_star: np.ndarray, rng: np.random.Generator) -> None:
        self.cfg, self.Q_star = cfg, Q_star
        self.A = np.asarray(cfg.teacher_A, dtype=np.float64)
        self.s = signs(cfg.T)
        self.z = cfg.sigma * rng.standard_normal((cfg.pop_points, cfg.T, 1 + 2 * cfg.rank))

    def _frame(self, Q: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
        """(a, Q* in the basis, Q in the basis or None, z in the basis) for span(1, Q, Q*)."""
        d = self.cfg.d
        one = np.full((d, 1), 1.0 / math.sqrt(d))
        cols = np.hstack([one, self.Q_star] + ([] if Q is None else [Q]))
        U, sv, _ = np.linalg.svd(cols, full_matrices=False)
        k = int(np.sum(sv > sv[0] * d * np.finfo(float).eps))
        B = U[:, :k]
        return (B.T @ one)[:, 0], B.T @ self.Q_star, None if Q is None else B.T @ Q, self.z[:, :, :k]

    def _moments(self, f: np.ndarray) -> tuple[float, float]:
        scale = 1.0 / (2 * self.cfg.d)
        return float(f.mean() * scale), float(f.std(ddof=1) / math.sqrt(f.size) * scale)

    def _mixing(self, Qs: np.ndarray, z: np.ndarray) -> np.ndarray:
        g = z @ Qs / math.sqrt(self.cfg.d)
        return (1.0 - self.cfg.omega) * row_softmax(g @ np.swapaxes(g, 1, 2)) + self.cfg.omega * self.A

    def error(self, Q: np.ndarray) -> tuple[float, float]:
        """The attention's population error and its standard error."""
        a, Qs, Qb, z = self._frame(Q)
        k, d = z.shape[2], self.cfg.d
        h = (self.s[None, :, None] * a[None, None, :] + z) @ Qb / math.sqrt(d)
        S = row_softmax(h @ np.swapaxes(h, 1, 2))
        D = S - self._mixing(Qs, z)
        V = (S @ self.s)[:, :, None] * a[None, None, :] + D @ z
        f = (V**2).sum(axis=(1, 2)) + self.cfg.sigma**2 * (d - k) * (D**2).sum(axis=(1, 2))
        return self._moments(f)

    def linear_error(self, B: np.ndarray) -> tuple[float, float]:
        """The population error of the linear map Y_hat = B xi, and its standard error."""
        _, Qs, _, z = self._frame(None)
        k, d = z.shape[2], self.cfg.d
        D = B[None] - self._mixing(Qs, z)
        f = ((D @ z) ** 2).sum(axis=(1, 2)) + self.cfg.sigma**2 * (d - k) * (D**2).sum(axis=(1, 2))
        return self._moments(f)


def linear_baseline(train: Tokens, n: int, cfg: Any, rng: np.random.Generator, pop: Population) -> dict:
    """The published linear baseline: Y_hat = B xi with B (T x T) from N(0, 1), trained by torch's
    Adam (lr 0.5, L2 weight decay 1e-4 added to the gradient) for 200 full-batch steps on the summed
    loss; its population error averaged over the last 5 steps, as the published script averages
    its test errors."""
    T, d = cfg.T, cfg.d
    B = rng.standard_normal((T, T))
    m, v = np.zeros_like(B), np.zeros_like(B)
    b1, b2, eps, lr, wd = 0.9, 0.999, 1e-8, LINEAR["lr"], LINEAR["weight_decay"]
    errors, ses = [], []
    for t in range(1, LINEAR["steps"] + 1):
        g = (B @ train.xixi - train.yxi) / d + wd * B
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        B = B - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        if t > LINEAR["steps"] - LINEAR["last"]:
            e, se = pop.linear_error(B)
            errors.append(e)
            ses.append(se)
    return {"linear_gen_error": float(np.mean(errors)), "linear_gen_error_se": float(np.mean(ses)), "B": B}


class PSStepper(Stepper):
    """GD (or AdamW) on Q: each step one pass of :func:`kernels.loss_grad`, the gradient handed to
    the run's plug-in optimizer (torch SGD's weight decay lambda Q added to it)."""

    def __init__(self, tokens: Tokens, Q0: np.ndarray, Q_star: np.ndarray, optimizer: Any, wd: float) -> None:
        self.t, self.Q_star, self.opt, self.wd = tokens, Q_star, optimizer, wd
        self.Q = np.array(Q0, dtype=np.float64, copy=True)
        self.grad = np.empty_like(self.Q)
        self.start: float | None = None  # the objective at the first step taken
        self.opt.start(self.state())

    # the objective (loss + weight decay) may not exceed this multiple of its start: a step size
    # that overshoots grows it geometrically long before anything overflows
    GROWTH = 10.0

    def _advance(self, step0: float, nsteps: float) -> tuple[int, float]:
        t = self.t
        for k in range(int(nsteps)):
            step = int(step0) + k
            loss = kernels.loss_grad(t.X, self.Q, t.K, t.C, t.yy, self.grad)
            if not (math.isfinite(loss) and np.isfinite(self.grad).all()):
                return Outcome.DIVERGED, step
            objective = loss + 0.5 * self.wd * float(np.vdot(self.Q, self.Q)) if self.wd else loss
            if self.start is None:
                self.start = objective
            elif self.start > 0.0 and objective > self.GROWTH * self.start:  # a start at 0: no scale
                self.detail = (
                    f"diverged at step {step}: the training objective grew from {self.start:.4g} to "
                    f"{objective:.4g} (more than {self.GROWTH:g}x its start); the step is unstable "
                    f"(reduce lr={self.opt.lr:g})"
                )
                return Outcome.DIVERGED, step
            self.opt.update(self.state(), {"Q": self.grad}, step + 1)
        if not np.isfinite(self.Q).all():
            return Outcome.DIVERGED, int(step0) + int(nsteps)
        return Outcome.FINISHED, int(step0) + int(nsteps)

    def state(self) -> dict[str, np.ndarray]:
        return {"Q": self.Q}

    def extra_metrics(self) -> dict[str, float]:
        t = self.t
        loss = float(kernels.loss_only(t.X, self.Q, t.K, t.C, t.yy))
        return {
            "train_loss_sum": loss,
            "train_objective": loss + 0.5 * self.wd * float((self.Q**2).sum()),
            **overlaps(self.Q, self.Q_star),
        }

    def _snapshot_extra(self) -> Any:
        return self.opt.snapshot()

    def _restore_extra(self, extra: Any) -> None:
        self.opt.restore(extra)


class Evaluator:
    """The population error (with its standard error) and the finite test set's error at a state."""

    def __init__(self, pop: Population, test: Tokens | None) -> None:
        self.pop, self.test = pop, test

    def __call__(self, state: dict) -> dict[str, float]:
        Q = np.asarray(state["Q"])
        gen, se = self.pop.error(Q)
        out = {"gen_error": gen, "gen_error_se": se}
        if self.test is not None:
            t = self.test
            out["test_error"] = float(kernels.loss_only(t.X, Q, t.K, t.C, t.yy)) / t.X.shape[0]
        return out

    def defer(self, state: dict) -> Done:
        return Done(self(state))
