"""check-grad on what trains (SPEC §8): the gradient a model's stepper actually applies, in every
engine the model declares, against central differences of the model's reference objective.

A model's :meth:`ModelSpec.check_grad` compares its readable NumPy reference with central
differences; that says nothing of the Numba kernels a run steps with. Here the stepper itself
takes one plain GD step (optimizer gd, after a few steps that move the state off its
initialization, where p = 0 hides W's gradient) and the gradient it applied is read back as
(theta - theta') / lr, block by block, then compared with central differences of
``problem.objective`` (the model's reference loss in the engine's coordinates, with the
penalty its GD applies) at theta. A kernel with a wrong gradient fails here whatever its
reference says (``tests/test_models.py`` proves it on the toy model).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import registry
from ..config import Config
from ..data.dataset import make_streams
from ..runtime.workspace import Workspace
from .base import GradCheck, Outcome, finite_difference_errors

WARM_STEPS = 3  # steps before the checked one: the state leaves its initialization (p(0) = 0 hides dL/dW)


def applied_gradient(
    stepper: Any, blocks: tuple[str, ...], lr: float, step0: int, spec: Any = None
) -> tuple[dict, dict]:
    """The state before the stepper's next GD step (copies of ``blocks``) and the gradient the
    step applied per block: (before - after) / lr, or what the model's spec reads back from a
    step that is not plain GD (:meth:`ModelSpec.applied_gradient`: a step projected on a sphere)."""
    before = {k: np.array(stepper.state()[k], dtype=np.float64, copy=True) for k in blocks}
    status, _ = stepper.advance(step0, 1)
    if status not in (Outcome.FINISHED, Outcome.FROZEN):
        raise RuntimeError(f"check-grad: the checked step ended {status.name}")
    after = {k: np.asarray(stepper.state()[k], dtype=np.float64) for k in blocks}
    if spec is None:
        return before, {k: (before[k] - after[k]) / lr for k in blocks}
    return before, {k: spec.applied_gradient(k, before[k], after[k], lr) for k in blocks}


def check_case(model: str, keys: Mapping[str, Any], h: float) -> tuple[str, dict]:
    """One case: the stepper of ``keys`` (a config of ``model``, stepped by plain GD), its applied
    gradient against central differences of its problem's objective. Returns the form the
    stepper took (the engine and its own words) and the errors per trained block."""
    spec = registry.spec(model)
    cfg = Config(**{**keys, "model": model, "optimizer": "gd", "integrator": "gd", "clean_twin": False})
    engine, reason = spec.plan(cfg, user_data=False)
    with warnings.catch_warnings():  # the small run's settings are the check's, not the user's
        warnings.simplefilter("ignore")
        problem, ds = spec.build(cfg, None, make_streams(cfg.seed), engine, reason, Workspace())
    stepper = problem.stepper(cfg, ds.relevant_indicator(problem.T), y=ds.y)
    status, _ = stepper.advance(0, WARM_STEPS)
    if status is not Outcome.FINISHED:
        raise RuntimeError(f"check-grad: the warm-up steps ended {status.name}")
    blocks = tuple(spec.trained_blocks(cfg, stepper.state()))
    theta, applied = applied_gradient(stepper, blocks, cfg.lr, WARM_STEPS, spec)
    state = dict(theta)
    full = {k: np.array(v, dtype=np.float64, copy=True) for k, v in stepper.state().items()}

    def objective(*values: np.ndarray) -> float:
        return problem.objective(cfg, {**full, **state, **dict(zip(blocks, values))}, ds.y)

    def tangent(block: str, g: np.ndarray) -> np.ndarray:  # the part of a gradient a step can apply
        return spec.tangent(block, theta[block], g)

    applied_list = lambda *_: [applied[k] for k in blocks]  # noqa: E731
    errors = finite_difference_errors(objective, applied_list, theta, h=h, project=tangent)
    form = problem.engine + (f", {problem.info['gd_state']}" if "gd_state" in problem.info else "")
    return form, errors


def check_applied(model: str, h: float = 1e-6, seed: int = 0) -> GradCheck:
    """Every gradient case the model names (:meth:`ModelSpec.gradient_cases`) in every engine it
    declares: the errors of the gradient its steppers apply, per case and block."""
    spec = registry.spec(model)
    errors: dict[str, dict] = {}
    for engine in registry.MODELS[model].engines:
        for label, keys in spec.gradient_cases(engine):
            form, errs = check_case(model, {**keys, "engine": engine, "seed": seed}, h)
            errors[f"{label} [{form}]"] = errs
    head = [
        f"{model}: the gradient each stepper applies (one GD step after {WARM_STEPS}, read back as "
        f"(theta - theta') / lr) against central differences of the reference objective, h = {h:g}"
    ]
    return GradCheck(head, errors)
