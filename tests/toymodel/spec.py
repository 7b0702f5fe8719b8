"""The toy model: logistic regression of the mean token, f(X) = w . mean_t x_t (uniform
attention), trained by GD on w. Written only against attnsim.models.base.

``_grad`` is its readable reference gradient, ``_step_grad`` the "kernel" its stepper
applies (a second implementation, as a model's Numba kernels are): the mutation test of
tests/test_models.py replaces the kernel with a wrong one, which the reference check alone
cannot see. Its own metric ``toy_margin`` (the smallest y f over the training set) reaches
result.json, records.csv and load_sweep through its registry entry."""

from __future__ import annotations

import dataclasses

import numpy as np

from attnsim import registry
from attnsim.data.synthetic import generate
from attnsim.models.base import (
    ClassifierStepper,
    GradCheck,
    ModelSpec,
    Observation,
    Outcome,
    finite_difference_errors,
)
from attnsim.registry import ANY, PAPER_DATA, SCHEDULE, VERDICTS, Entry


def _loss(M, y, w):
    m = y * (M @ w)
    return float(np.mean(np.logaddexp(0.0, -m)))


def _grad(M, y, w):
    m = y * (M @ w)
    return [-(y / (1.0 + np.exp(m))) @ M / y.size]


def _step_grad(M, y, w):
    """The stepper's gradient: the same as ``_grad``, computed sample by sample."""
    g = np.zeros_like(w)
    for i in range(y.size):
        g -= y[i] * M[i] / (1.0 + np.exp(y[i] * (M[i] @ w)))
    return g / y.size


_RIGHT_STEP_GRAD = _step_grad  # the mutation test swaps _step_grad for wrong_step_grad


def wrong_step_grad(M, y, w):
    """A deliberately wrong kernel: the last coordinate's gradient is 10 % too large."""
    g = _RIGHT_STEP_GRAD(M, y, w)
    g[-1] *= 1.1
    return g


class ToyStepper(ClassifierStepper):
    def __init__(self, X, y, w0, optimizer, rel):
        n, T, _ = X.shape
        self.X, self.M, self.y, self.opt = X, X.mean(axis=1), y, optimizer
        self.w = w0.copy()
        self.opt.start(self.state())
        self._init_records(n, rel, T)

    def _advance(self, step0, nsteps):
        for k in range(int(nsteps)):
            step = int(step0) + k
            f = self.M @ self.w
            fitted = self.y * f > 0
            self.fit_since[:] = np.where(fitted, np.where(self.fit_since < 0, step, self.fit_since), -1)
            self.S_acc += self.relevant_increments(self.observe().s)
            g = _step_grad(self.M, self.y, self.w)
            if not np.all(np.isfinite(g)):
                return Outcome.DIVERGED, step
            self.opt.update(self.state(), {"w": g}, step + 1)  # any plug-in optimizer
        return Outcome.FINISHED, int(step0) + int(nsteps)

    def observe(self):
        n, T, _ = self.X.shape
        u = self.X @ self.w
        f = self.M @ self.w
        return Observation(np.zeros((n, T)), u, np.full((n, T), 1.0 / T), f, _loss(self.M, self.y, self.w))

    def state(self):
        return {"w": self.w}

    def extra_metrics(self):
        return {"toy_margin": float(np.min(self.y * (self.M @ self.w)))}


class ToyProblem:
    engine = "dense"
    reason = "the toy runs in d dimensions"

    def __init__(self, ds, w0):
        self.ds, self.w0 = ds, w0
        self.T, self.y = ds.X.shape[1], ds.y
        self.info = {"test_n": 0}

    def stepper(self, cfg, rel, y=None):
        return ToyStepper(self.ds.X, self.y if y is None else y, self.w0, registry.make_optimizer(cfg), rel)

    def evaluator(self, cfg, pop):
        return None

    def objective(self, cfg, state, y):
        return _loss(self.ds.X.mean(axis=1), y, state["w"])


class ToySpec(ModelSpec):
    name = "toy"
    integrators = ("gd",)  # what its problem builds a stepper for
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

# its one registry line: what it runs (the plug-in optimizers on its block w) and its own metric
TOY_ENTRY = Entry(
    "toymodel",
    optimizers=ANY,
    blocks=("w",),
    metrics={"toy_margin": "the smallest y f over the training set"},
    reads=PAPER_DATA + SCHEDULE + VERDICTS,  # the paper's data (generate), the driver, the paper's recorder
)


# one deliberate fault per class of the contract (SPEC §19): each must fail the conformance suite
FAULTS = (
    "wrong_kernel",
    "ignored_capability",
    "no_stepper",
    "colliding_metric",
    "unread_key",
    "unfilled_metric",
)


def entry(fault: str = "right") -> Entry:
    """The toy's registry line, or that line with the fault ``fault`` (the others live in
    tests/conftest.py: a wrong kernel, an own key it never reads)."""
    if fault == "ignored_capability":  # declares StableMax, and scores uniformly all the same
        return dataclasses.replace(TOY_ENTRY, attentions=("softmax", "stablemax"))
    if fault == "no_stepper":  # declares a gradient flow it has no stepper for
        return dataclasses.replace(TOY_ENTRY, integrators=("gd", "flow"))
    if fault == "colliding_metric":  # a name positional_semantic's metric has, with another meaning
        return dataclasses.replace(
            TOY_ENTRY, metrics={**TOY_ENTRY.metrics, "gen_error": "the smallest margin"}
        )
    if fault == "unfilled_metric":  # declared, never recorded
        return dataclasses.replace(
            TOY_ENTRY, metrics={**TOY_ENTRY.metrics, "toy_spread": "the spread of y f"}
        )
    return TOY_ENTRY
