"""The toy model: logistic regression of the mean token, f(X) = w . mean_t x_t (uniform
attention), trained by GD on w. Written only against attnsim.models.base."""

from __future__ import annotations

import numpy as np

from attnsim.data.synthetic import generate
from attnsim.models.base import GradCheck, ModelSpec, Observation, Outcome, Stepper, finite_difference_errors


def _loss(M, y, w):
    m = y * (M @ w)
    return float(np.mean(np.logaddexp(0.0, -m)))


def _grad(M, y, w):
    m = y * (M @ w)
    return [-(y / (1.0 + np.exp(m))) @ M / y.size]


class ToyStepper(Stepper):
    def __init__(self, X, y, w0, lr, rel):
        n, T, _ = X.shape
        self.X, self.M, self.y, self.lr = X, X.mean(axis=1), y, lr
        self.w = w0.copy()
        self._init_records(n, rel, T)

    def _advance(self, step0, nsteps):
        for k in range(int(nsteps)):
            step = int(step0) + k
            f = self.M @ self.w
            fitted = self.y * f > 0
            self.fit_since[:] = np.where(fitted, np.where(self.fit_since < 0, step, self.fit_since), -1)
            self.S_acc += self.relevant_increments(self.observe().s)
            g = _grad(self.M, self.y, self.w)[0]
            if not np.all(np.isfinite(g)):
                return Outcome.DIVERGED, step
            self.w -= self.lr * g
        return Outcome.FINISHED, int(step0) + int(nsteps)

    def observe(self):
        n, T, _ = self.X.shape
        u = self.X @ self.w
        f = self.M @ self.w
        return Observation(np.zeros((n, T)), u, np.full((n, T), 1.0 / T), f, _loss(self.M, self.y, self.w))

    def state(self):
        return {"w": self.w}


class ToyProblem:
    engine = "dense"
    reason = "the toy runs in d dimensions"

    def __init__(self, ds, w0):
        self.ds, self.w0 = ds, w0
        self.T, self.y = ds.X.shape[1], ds.y
        self.info = {"test_n": 0}

    def stepper(self, cfg, rel, y=None):
        return ToyStepper(self.ds.X, self.y if y is None else y, self.w0, cfg.lr, rel)

    def evaluator(self, cfg, pop):
        return None


class ToySpec(ModelSpec):
    name = "toy"
    warm_configs = {"gd": {"model": "toy", "n": 4, "T": 4, "d": 6, "steps": 2}}

    def plan(self, cfg, user_data):
        return "dense", "the toy runs in d dimensions"

    def build(self, cfg, ds, streams, engine, reason, ws):
        ds = generate(cfg, streams) if ds is None else ds
        w0 = cfg.toy_scale * (ds.mu_pos - ds.mu_neg) / np.linalg.norm(ds.mu_pos - ds.mu_neg) ** 2
        return ToyProblem(ds, w0), ds

    def check_grad(self, cfg, seed, h):
        rng = np.random.default_rng(seed)
        M, y, w = rng.standard_normal((7, 5)), np.sign(rng.standard_normal(7)), rng.standard_normal(5)
        errs = finite_difference_errors(lambda w_: _loss(M, y, w_), lambda w_: _grad(M, y, w_), {"w": w}, h=h)
        return GradCheck(["toy: central differences of the mean logistic loss"], {"logistic": errs})


SPEC = ToySpec()
