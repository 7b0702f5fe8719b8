"""The attention model f(X) = nu^T X^T softmax(X W p) as attnsim runs it (SPEC §1-§5):
its engines, population metrics, warm-up and gradient check behind the ModelSpec."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..._meta import FRESH_INTEGRATORS, POPULATION_INTEGRATORS
from ...config import Config, ConfigError
from ...data.dataset import DataError, Dataset, Streams
from ...runtime.workspace import Workspace
from ..base import GradCheck, ModelSpec
from . import plan

# The spec plans a run with the config alone (a sweep's parent does, for every point),
# so the modules that load Numba's kernels, SciPy's solvers and BLAS are imported by
# the methods that run the model ("lazy" below: start-up of the planning commands).

POPULATION_METHOD = "importance sampling around the error's design points (README: 'Population metrics')"


class AttentionSpec(ModelSpec):
    name = "attention"
    integrators = (
        "gd",
        "flow",
        "population",
        "population_flow",
        "online",
    )  # what its problem builds a stepper for
    warm_configs = {
        "gd": {"n": 4, "T": 4, "d": 12, "steps": 2, "pop_points": 16, "test_n": 2},
        "flow": {"n": 4, "T": 4, "d": 12, "steps": 2, "pop_points": 16, "integrator": "flow"},
        **{
            name: {
                **({} if name in POPULATION_INTEGRATORS else {"n": 4}),  # the population has no n
                "T": 4,
                "d": 12,
                "steps": 2,
                "pop_points": 16,
                "integrator": name,
                "init_W": "identity",
                "train": "p",
            }
            for name in FRESH_INTEGRATORS
        },
    }

    def validate(self, cfg: Config, user_data: bool) -> None:
        """Every key of the attention model is checked by :class:`attnsim.config.Config` and the plan."""

    def gradient_cases(self, engine: str) -> list[tuple[str, dict]]:
        """Every kernel a GD step can take: the W form with every block trained (logistic and
        linear loss, softmax and StableMax), the X W form with W and p trained (log points far
        apart) and with p alone; the implicit engine from its own initialization (p(0) = 0)."""
        small = {"n": 4, "T": 4, "d": 24, "pop_points": 16, "steps": 1000, "lr": 0.05}
        if engine == "implicit":
            small = {**small, "init_W": "gaussian", "train": "W,p"}
            return [("W,p logistic", small), ("W,p linear", {**small, "loss": "linear"})]
        drawn = {**small, "init_p": "gaussian", "log_every": 10}
        far = {**small, "init_p": "gaussian", "log_every": 1000}  # the X W form (n T <= k, few log points)
        return [
            ("W,p,nu logistic", {**drawn, "train": "W,p,nu"}),
            ("W,p,nu linear", {**drawn, "train": "W,p,nu", "loss": "linear"}),
            ("W,p,nu stablemax", {**drawn, "train": "W,p,nu", "attention": "stablemax"}),
            ("W,p logistic", {**far, "train": "W,p"}),
            ("p logistic", {**far, "train": "p", "init_W": "identity"}),
        ]

    def trained_blocks(self, cfg: Config, state: Any) -> tuple[str, ...]:
        return tuple(b for b in ("W", "p", "nu") if b in cfg.train_set)

    def plan(self, cfg: Config, user_data: bool) -> tuple[str, str]:
        if cfg.precision_twin != "none" and os.environ.get("NUMBA_DISABLE_JIT", "0").strip() not in ("", "0"):
            raise ConfigError(
                f"precision_twin: {cfg.precision_twin} rounds every fused multiply-add in one compiled "
                "instruction, which NUMBA_DISABLE_JIT=1 cannot run as Python; unset NUMBA_DISABLE_JIT (or "
                "precision_twin=none)"
            )
        return plan.choose_engine(cfg, user_data)

    def memory_estimate(self, cfg: Config, engine: str, save_scores: bool = False) -> list:
        return plan.memory_estimate(cfg, engine, save_scores)

    def check_resources(self, cfg: Config, engine: str, save_scores: bool = False) -> None:
        plan.check_resources(cfg, engine, save_scores)

    def step_flops(self, cfg: Config, engine: str) -> float:
        return plan.step_flops(cfg, engine)

    def setup_key(self, cfg: Config) -> tuple:
        return plan.setup_key(cfg)

    def setup_flops(self, cfg: Config, engine: str) -> float:
        return plan.setup_flops(cfg, engine)

    def run_flops(self, cfg: Config, engine: str) -> float:
        return plan.run_flops(cfg, engine)

    def setup_threads(self, cfg: Config, engine: str) -> int | None:
        """Every BLAS thread for the d^2 k setup products at large d; elsewhere one (its threads
        keep spinning after each call and slow Numba's)."""
        return None if engine != "implicit" and cfg.d >= plan.BLAS_THREADS_FROM_D else 1

    def check_data(self, cfg: Config, ds: Dataset) -> None:
        """A zero head that is not trained: the output is 0 for every input."""
        if ds.nu is not None and not np.any(ds.nu) and "nu" not in cfg.train_set:
            raise DataError(
                f"{ds.source}: nu is all zeros: the output is 0 for every input and no gradient reaches W or "
                "p; give a nonzero nu or train it (train = W,p,nu)"
            )

    def warm_up(self) -> None:
        from ...runtime.threads import blas  # lazy
        from .population import HERMITE_NODES, expected_softplus, hermite_rule  # lazy
        from .steppers import warmup  # lazy

        warmup()
        blas()
        for _, nodes in HERMITE_NODES:
            hermite_rule(nodes)
        expected_softplus(np.zeros(3), np.array([0.1, 0.5, 2.0]))  # each rule's kernels

    def prepare(self, cfg: Config, engine: str, user_data: bool, ws: Workspace) -> float:
        """Once-per-process work before the setup (seconds, counted as start-up): the W(0) buffer."""
        from .engines import reserve_w0  # lazy

        return reserve_w0(cfg.d, ws) if engine == "reduced" and not user_data else 0.0

    def build(
        self, cfg: Config, ds: Dataset | None, streams: Streams, engine: str, reason: str, ws: Workspace
    ) -> tuple[Any, Dataset]:
        from .engines import build  # lazy

        return build(cfg, ds, streams, engine, reason, ws)

    def population(self, cfg: Config, ds: Dataset, rng: np.random.Generator, ws: Workspace) -> Any:
        if ds.population_reason is not None:
            return None
        if cfg.data_model == "magen2025":
            from .population.magen import MagenPopulation  # lazy

            return MagenPopulation(ds.sigma, float(np.linalg.norm(ds.mu_pos)), cfg.loss)
        from .population import cached_population  # lazy

        roles = np.repeat(np.arange(4), ds.role_counts)
        rho = ds.rho if ds.rho is not None else cfg.rho
        return cached_population(
            ws, (cfg.seed, cfg.pop_seed), roles, rho, ds.sigma, cfg.pop_points, cfg.loss, rng, cfg.attention
        )

    def limit_watch(self, problem: Any) -> Any:
        from .limit import LimitWatch  # lazy

        return LimitWatch(problem)

    def precision_twin(self, problem: Any, cfg: Config, rel: np.ndarray, y: np.ndarray) -> Any:
        if cfg.precision_twin == "none":
            return None
        from .precision import PrecisionTwin  # lazy: its kernels load only for a twin
        from .steppers import state_q  # lazy

        adam = (cfg.adam_beta1, cfg.adam_beta2, cfg.adam_eps, cfg.weight_decay)
        full = problem.dense_view()  # the twin holds d x d W as torch does, whatever the run's engine
        return PrecisionTwin(
            full.X2,
            y,
            full.W0,
            full.p0,
            full.nu0,
            full.T,
            rel,
            cfg.train_set,
            cfg.lr,
            cfg.precision_twin,
            adam=adam if cfg.optimizer == "adam" else None,
            graph=cfg.precision_graph,
            attention=cfg.attention,
            problem=full,
            run_q_of=None if full is problem else lambda st: problem.lift_q(state_q(st), st["p"]),
        )

    def population_note(self, ds: Dataset, problem: Any) -> str:
        return ds.population_reason or POPULATION_METHOD

    def check_grad(self, cfg: Config, seed: int, h: float) -> GradCheck:
        from ..base import finite_difference_errors  # lazy
        from .reference import random_instance  # lazy
        from .steppers import loss_and_grads  # lazy

        X, y, W, p, nu = random_instance(seed)
        n, T, k = X.shape
        head = [f"central differences, h = {h:g}, n={n} T={T} k={k} r={W.shape[1]}, p != 0"]
        errors = {
            loss: finite_difference_errors(
                lambda W_, p_, nu_, loss=loss: loss_and_grads(X, y, W_, p_, nu_, loss)[0],
                lambda W_, p_, nu_, loss=loss: loss_and_grads(X, y, W_, p_, nu_, loss)[1:],
                {"W": W, "p": p, "nu": nu},
                h=h,
            )
            for loss in ("logistic", "linear")
        }
        return GradCheck(head, errors)


SPEC = AttentionSpec()
