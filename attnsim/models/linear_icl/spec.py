"""Linear attention trained in context as attnsim runs it (SPEC §21a): the ModelSpec (its planning
needs the config alone; the data and solvers load with the methods that run the model, "lazy")."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ...config import Config
from ..base import ConfigError, GradCheck, ModelSpec, Theory, TheoryError
from ..own import OwnData, fmt

if TYPE_CHECKING:  # names in annotations only
    from ...data.dataset import Streams
    from ...runtime.workspace import Workspace

REASON = "linear_icl runs on the pretraining sequences' sufficient statistics (x_q, h, y_q): O(n d) numbers"
THEORY_KEYS = ("context_ratio", "task_ratio", "sample_ratio", "noise_var", "ridge")


class Problem:
    """The pretraining data as statistics, Gamma(0), the task moments of e_ICL and e_IDG, the solvers."""

    engine = "statistics"
    reason = REASON
    y = None

    def __init__(self, cfg: Config, streams: Streams) -> None:
        from .model import Matvec  # lazy
        from .reference import draw_tasks, features, task_count  # lazy

        d = cfg.d
        self.T = 1
        self.k, self.reps, self.n = task_count(d, cfg.task_ratio, cfg.sample_ratio)
        self.ell = int(cfg.context_ratio * d)
        self.alpha_ell = (cfg.context_ratio, self.ell)
        self.tasks = draw_tasks(self.k, d, streams.data)
        W = np.repeat(self.tasks[None], self.reps, axis=0).reshape(self.n, d)
        xq, h, y = features(W, self.ell, cfg.noise_var, streams.data)
        self.mv = Matvec(xq, h, y, cfg.ridge)
        self.mu_icl, self.R_icl = np.zeros(d), np.eye(d)
        self.mu_idg, self.R_idg = self.tasks.mean(axis=0), self.tasks.T @ self.tasks / self.k
        scale = cfg.init_scale / math.sqrt(d)
        self.gamma0 = scale * streams.init.standard_normal((d, d + 1)) if scale else np.zeros((d, d + 1))
        self._closed = None
        self.info = {"n": self.n, "tasks": self.k, "context": self.ell}

    def closed_form(self) -> Any:
        from .model import ClosedForm  # lazy

        if self._closed is None:
            self._closed = ClosedForm(self.mv)
        return self._closed

    def ridge_solution(self) -> tuple[np.ndarray, bool]:
        """A^-1 b by preconditioned conjugate gradients (model.Matvec.ridge_solution): whether it
        converged to 1e-12, and its iterations in the engine facts."""
        G, iters, ok = self.mv.ridge_solution()
        self.info["cg_iterations"] = iters
        return G, ok

    def stepper(self, cfg: Config, rel: Any = None, y: Any = None) -> Any:
        from .model import EIG_MAX, PathStepper, RidgeStepper, StepGD  # lazy

        if cfg.integrator == "ridge":
            return RidgeStepper(self, cfg)
        if cfg.integrator == "flow" or self.mv.p <= EIG_MAX:
            return PathStepper(self, cfg)
        return StepGD(self, cfg)

    def evaluator(self, cfg: Config, pop: Any) -> None:
        return None  # the errors are exact, at every log point (the stepper's metrics)

    def objective(self, cfg: Config, state: dict, y: Any) -> float:
        from .reference import loss  # lazy

        return loss(self.mv.xq, self.mv.h, self.mv.y, np.asarray(state["Gamma"]), cfg.ridge)


class LinearICLSpec(ModelSpec):
    name = "linear_icl"
    classifier = False
    integrators = ("ridge", "gd", "flow")
    plot_groups = (
        ("errors", ("e_icl", "e_idg", "train_loss"), True),
        ("task generalization gap", ("g_task",), False),
        ("|Gamma|", ("gamma_norm",), False),
    )
    _small = {"model": "linear_icl", "d": 4, "context_ratio": 2.0, "sample_ratio": 3.0}
    warm_configs = {
        "ridge": {**_small, "integrator": "ridge"},
        "gd": {**_small, "integrator": "gd", "steps": 3, "lr": 1.0},
        "flow": {**_small, "integrator": "flow", "steps": 3, "lr": 1.0},
    }

    def gradient_cases(self, engine: str) -> list[tuple[str, dict]]:
        return [("gd", {**self.warm_configs["gd"], "ridge": 0.3, "init_scale": 0.5, "lr": 0.5})]

    def plan(self, cfg: Config, user_data: bool) -> tuple[str, str]:
        if user_data:
            raise ConfigError("data: linear_icl draws its own pretraining data (no data file)")
        return "statistics", REASON

    def _sizes(self, cfg: Config) -> tuple[int, int]:
        from .reference import task_count  # lazy: plain arithmetic

        n = task_count(cfg.d, cfg.task_ratio, cfg.sample_ratio)[2]
        return n, cfg.d * (cfg.d + 1)

    def validate(self, cfg: Config, user_data: bool) -> None:
        n, p = self._sizes(cfg)
        if cfg.ridge == 0 and n < p and cfg.integrator == "ridge":
            raise ConfigError(
                f"ridge: 0 with n = {n} sequences below the d(d+1) = {p} entries of Gamma leaves the "
                "endpoint undetermined; set ridge > 0 (the theory's ridgeless limit is ridge -> 0)"
            )

    def memory_estimate(self, cfg: Config, engine: str, save_scores: bool = False) -> list:
        from .model import EIG_MAX  # lazy: a constant

        n, p = self._sizes(cfg)
        d = cfg.d
        out = [("n, d", f"the {n} sequences' statistics (n*(2d+2) floats)", 8.0 * n * (2 * d + 2))]
        if p <= EIG_MAX and cfg.integrator in ("gd", "flow", "ridge"):
            out.append(("d", f"the Hessian and its eigenbasis (2 * {p}^2 floats)", 16.0 * p * p))
        return out

    def step_flops(self, cfg: Config, engine: str) -> float:
        n, p = self._sizes(cfg)
        return 4.0 * n * p

    def setup_flops(self, cfg: Config, engine: str) -> float:
        n, p = self._sizes(cfg)
        return 20.0 * n * cfg.d + (n * p * p + 10.0 * p**3 if p <= 4500 else 50 * 4.0 * n * p)

    def run_flops(self, cfg: Config, engine: str) -> float:
        return self.setup_flops(cfg, engine)

    def check_resources(self, cfg: Config, engine: str, save_scores: bool = False) -> None:
        from ...runtime.resources import check_fits  # lazy

        check_fits(self.memory_estimate(cfg, engine, save_scores), 1, 0.0, ConfigError)

    def setup_key(self, cfg: Config) -> tuple:
        return (cfg.seed, cfg.d, cfg.context_ratio, cfg.task_ratio, cfg.sample_ratio, cfg.noise_var)

    def build(
        self, cfg: Config, ds: Any, streams: Streams, engine: str, reason: str, ws: Workspace
    ) -> tuple[Problem, OwnData]:
        problem = Problem(cfg, streams)
        kappa = "a fresh task per sequence" if math.isinf(cfg.task_ratio) else f"{problem.k} tasks"
        source = (
            f"generated: Lu et al. (2025) in-context regression, d = {cfg.d}, {problem.n} sequences of "
            f"{problem.ell} pairs, {kappa}"
        )
        return problem, OwnData(source)

    def trained_blocks(self, cfg: Config, state: Any) -> tuple[str, ...]:
        return ("Gamma",)

    def summary(self, res: Any) -> list[str]:
        c, f, e = res.config, res.final, res.engine
        kappa = (
            "inf (a fresh task per sequence)"
            if c["task_ratio"] in ("inf", math.inf)
            else f"{c['task_ratio']:g}"
        )
        how = {
            "ridge": "the ridge endpoint solved directly",
            "gd": f"GD, lr {c['lr']:g}, {c['steps']} steps (closed form)",
            "flow": f"gradient flow to t = {c['lr'] * c['steps']:g} (closed form)",
        }[c["integrator"]]
        th = _theory_line(c)
        return [
            f"data: Lu et al. (2025) in-context linear regression, d = {c['d']}, "
            f"alpha = {c['context_ratio']:g} ({e.get('context')} pairs), kappa = {kappa} "
            f"({e.get('tasks')} tasks), "
            f"tau = {c['sample_ratio']:g} "
            f"({e.get('n')} sequences), rho = {c['noise_var']:g}, lambda = {c['ridge']:g}",
            f"training: {how}",
            f"errors (exact for the trained Gamma): e_ICL {fmt(f['e_icl'])}, e_IDG {fmt(f['e_idg'])}, "
            f"g_task {fmt(f['g_task'])}; training loss {fmt(f['train_loss'])}",
            *([th] if th else []),
        ]

    def theory(self, values: dict, options: dict, progress: Any) -> Theory:
        from .theory import theory  # lazy

        other = sorted(set(values) - set(THEORY_KEYS))
        if other:
            raise TheoryError(
                f"--set {other[0]}: the theory (d -> infinity) takes only {', '.join(THEORY_KEYS)}"
            )
        if options.get("transition"):
            raise TheoryError("--transition: linear_icl has no phase transition here")
        if options.get("branch") is not None or options.get("int_tol") is not None:
            raise TheoryError("--branch and --int-tol: positional_semantic's; linear_icl takes --rule only")
        rule = options.get("rule", "exact")
        if rule not in ("exact", "published"):
            raise TheoryError(f"--rule: linear_icl takes exact or published, got {rule}")
        try:
            cfg = Config(model="linear_icl", **values)
        except ConfigError as exc:
            raise TheoryError(f"--set {exc}") from None
        a, k, t, rho, lam = (getattr(cfg, key) for key in THEORY_KEYS)
        point = theory(a, k, t, rho, lam, published=rule == "published")
        data = {"alpha": a, "kappa": "inf" if math.isinf(k) else k, "tau": t, "rho": rho, "lambda": lam,
                "e_icl": point.e_icl, "e_idg": point.e_idg, "eps": point.eps, "rule": rule}  # fmt: skip
        if point.e_icl is None:
            return Theory([], data, False, point.message)
        which = "ridgeless (lambda -> 0)" if lam == 0 else f"ridge lambda = {lam:g}, eps = {point.eps:.10g}"
        lines = [
            f"Lu et al. (2025) at d -> infinity: alpha = {a:g}, kappa = {data['kappa']}, tau = {t:g}, "
            f"rho = {rho:g}, {which}",
            f"e_ICL = {point.e_icl:.10g}"
            + (
                f", e_IDG = {point.e_idg:.10g}"
                if point.e_idg is not None
                else " (e_IDG: no ridge formula in the release)"
            ),  # fmt: skip
        ]
        if rule == "published":
            lines.append(
                "the ridge root rounded to 6 decimals, as the authors' release does (--rule published)"
            )
        return Theory(lines, data)

    def check_grad(self, cfg: Config, seed: int, h: float) -> GradCheck:
        from ..base import finite_difference_errors  # lazy
        from .reference import draw_tasks, features, grad, loss  # lazy

        rng = np.random.default_rng(seed)
        d, n, ell, rho, lam = 3, 20, 7, 0.1, 0.3
        W = np.repeat(draw_tasks(2, d, rng), n // 2, axis=0)
        xq, hh, y = features(W, ell, rho, rng)
        G = rng.standard_normal((d, d + 1))
        errors = {
            "ridge objective": finite_difference_errors(
                lambda G_: loss(xq, hh, y, G_, lam), lambda G_: [grad(xq, hh, y, G_, lam)], {"Gamma": G}, h=h
            )
        }
        return GradCheck(
            [f"linear_icl: central differences of the ridge objective, h = {h:g}, d={d} n={n}"], errors
        )


def _theory_line(c: dict) -> str:
    """The theory's errors beside a run (d -> infinity at the run's ratios)."""
    from .theory import theory  # lazy

    k = math.inf if c["task_ratio"] in ("inf", math.inf) else c["task_ratio"]
    point = theory(c["context_ratio"], k, c["sample_ratio"], c["noise_var"], c["ridge"])
    if point.e_icl is None:
        return ""
    idg = f", e_IDG {point.e_idg:.4g}" if point.e_idg is not None else ""
    return f"theory at d -> infinity (attnsim theory linear_icl): e_ICL {point.e_icl:.4g}{idg}"


SPEC = LinearICLSpec()
