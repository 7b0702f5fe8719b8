"""Single-location regression as attnsim runs it (SPEC §20): the ModelSpec (its planning needs the
config alone; the kernels and steppers load with the methods that run the model, "lazy")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...config import Config
from ..base import ConfigError, GradCheck, ModelSpec
from ..own import OwnData, fmt, with_se

if TYPE_CHECKING:  # names in annotations only
    from ...data.dataset import Streams
    from ...runtime.workspace import Workspace

SAMPLES = "single_location trains on its (n, L, d) tokens in d dimensions"
OVERLAPS = "the population PGD in coefficients of (k(0), v(0), k*, v*): exact at any d, O(1) per step"


class Problem:
    """The drawn teacher, initial k, v, training and test sets; the steppers and the evaluator."""

    T: int
    y = None

    def __init__(self, cfg: Config, engine: str, reason: str, streams: Streams) -> None:
        from .reference import draw, initial_kv, teacher_directions  # lazy

        self.engine, self.reason, self.T = engine, reason, cfg.T
        self.k_star, self.v_star = teacher_directions(cfg.d, streams.data)
        self.k0, self.v0 = initial_kv(cfg.init, self.k_star, self.v_star, streams.init)
        self.train = None
        if cfg.integrator == "gd":
            self.train = draw(cfg.n, cfg.T, self.k_star, self.v_star, cfg.gamma, cfg.label_sd, streams.data)
        self.batches = streams.data  # online SGD's fresh samples, after the teacher
        self.test = None
        if cfg.test_n:
            self.test = draw(
                cfg.test_n, cfg.T, self.k_star, self.v_star, cfg.gamma, cfg.label_sd, streams.test
            )
        self.info = {"test_n": cfg.test_n}

    def stepper(self, cfg: Config, rel: Any = None, y: Any = None) -> Any:
        from .model import PopulationStepper, SampleStepper  # lazy

        if cfg.integrator == "population":
            return PopulationStepper(cfg, self.k0, self.v0, self.k_star, self.v_star)
        X, y = self.train if self.train is not None else (None, None)
        rng = self.batches if cfg.integrator == "online" else None
        return SampleStepper(cfg, self.k0, self.v0, self.k_star, self.v_star, X, y, rng)

    def evaluator(self, cfg: Config, pop: Any) -> Any:
        from .model import Evaluator  # lazy

        return Evaluator(cfg, pop, (self.k_star, self.v_star), self.test)

    def objective(self, cfg: Config, state: dict, y: Any) -> float:
        from .reference import loss  # lazy

        X, labels = self.train
        return loss(
            X, labels, np.asarray(state["k"]), np.asarray(state["v"]), float(state["scale"]), cfg.attention
        )


class SingleLocationSpec(ModelSpec):
    name = "single_location"
    classifier = False
    integrators = ("population", "gd", "online")
    plot_groups = (
        ("risk", ("risk", "test_risk", "train_loss"), True),
        ("overlaps with the teacher", ("k_kstar", "v_vstar"), False),
        ("distance to the manifold", ("manifold_distance", "v_kstar", "vstar_k", "k_v"), False),
    )
    _small = {"model": "single_location", "d": 12, "T": 3, "steps": 2, "log_every": 1, "test_n": 8}
    warm_configs = {
        "population": {**_small, "integrator": "population"},
        "gd": {**_small, "integrator": "gd", "n": 6, "attention_scale": 0.5, "lr": 0.05},
        "online": {**_small, "integrator": "online", "batch": 3, "attention_scale": 0.5, "lr": 0.05},
    }

    def gradient_cases(self, engine: str) -> list[tuple[str, dict]]:
        gd = {**self.warm_configs["gd"], "init": "sphere"}
        return [(att, {**gd, "attention": att}) for att in ("erf", "softmax", "linear")]

    def plan(self, cfg: Config, user_data: bool) -> tuple[str, str]:
        if user_data:
            raise ConfigError("data: single_location draws its own data (no data file)")
        if cfg.integrator == "population":
            return "overlaps", OVERLAPS
        return "dense", SAMPLES

    def memory_estimate(self, cfg: Config, engine: str, save_scores: bool = False) -> list:
        T, d = cfg.T, cfg.d
        out = [("d", "k*, v*, k(0), v(0) and the state (8 vectors of d floats)", 64.0 * d)]
        if cfg.integrator == "gd":
            out.append(
                ("n, T, d", f"the training tokens (n*T*d = {cfg.n}*{T}*{d} floats)", 8.0 * cfg.n * T * d)
            )
        if cfg.integrator == "online":
            out.append(("batch, T, d", "a batch's tokens", 8.0 * cfg.batch * T * d))
        if cfg.test_n:
            out.append(
                ("test_n, T, d", f"the test tokens ({cfg.test_n}*{T}*{d} floats)", 8.0 * cfg.test_n * T * d)
            )
        return out

    def step_flops(self, cfg: Config, engine: str) -> float:
        if cfg.integrator == "population":
            return 2000.0
        n = cfg.n if cfg.integrator == "gd" else cfg.batch * 10  # a fresh batch's draws cost about that
        return 6.0 * n * cfg.T * cfg.d

    def setup_flops(self, cfg: Config, engine: str) -> float:
        return 4.0 * ((cfg.n if cfg.integrator == "gd" else 0) + cfg.test_n) * cfg.T * cfg.d

    def run_flops(self, cfg: Config, engine: str) -> float:
        return cfg.steps * self.step_flops(cfg, engine)

    def setup_key(self, cfg: Config) -> tuple:
        return (cfg.seed, cfg.n, cfg.T, cfg.d, cfg.gamma, cfg.label_sd, cfg.init, cfg.integrator, cfg.test_n)

    def build(
        self, cfg: Config, ds: Any, streams: Streams, engine: str, reason: str, ws: Workspace
    ) -> tuple[Problem, OwnData]:
        problem = Problem(cfg, engine, reason, streams)
        what = {"population": "its population risk", "gd": f"{cfg.n} samples", "online": "fresh batches"}
        source = (
            f"generated: Marion et al. (2025) single-location regression, L = {cfg.T} tokens in d = {cfg.d}, "
            f"trained on {what[cfg.integrator]}"
        )
        return problem, OwnData(source)

    def population(self, cfg: Config, ds: OwnData, rng: np.random.Generator, ws: Workspace) -> Any:
        from .model import Population  # lazy

        return Population(cfg, rng)

    def trained_blocks(self, cfg: Config, state: Any) -> tuple[str, ...]:
        return ("k", "v")

    def applied_gradient(self, block: str, before: np.ndarray, after: np.ndarray, lr: float) -> np.ndarray:
        """A projected step x' = (x - lr g_t) / |x - lr g_t| with g_t orthogonal to x: x . x' |x - lr g_t|
        = 1, so g_t = (x - x' / (x . x')) / lr."""
        return (before - after / float(before @ after)) / lr

    def tangent(self, block: str, theta: np.ndarray, g: np.ndarray) -> np.ndarray:
        return g - float(theta @ g) * theta

    def summary(self, res: Any) -> list[str]:
        c, f = res.config, res.final
        lam = f"lambda {c['attention_scale']:g}" + (" / (1 + 1e-4 t)" if c["scale_schedule"] else "")
        how = {"population": "projected GD on the population risk", "gd": f"projected GD on {c['n']} samples",
               "online": f"projected SGD on fresh batches of {c['batch']}"}[c["integrator"]]  # fmt: skip
        test = ""
        if f.get("test_risk") is not None:
            test = f"; on {c['test_n']} test samples {with_se(f['test_risk'], f['test_risk_se'])}"
        exact = " (closed form)" if f.get("risk_se") == 0.0 else ""
        return [
            f"data: Marion et al. (2025) single-location regression, L = {c['T']} tokens in d = {c['d']}, "
            f"gamma = {c['gamma']:g}, label sd {c['label_sd']:g}; {c['attention']} attention, {lam}",
            f"training: {how}, lr {c['lr']:g}, {c['steps']} steps from init {c['init']}",
            f"risk E(T(X) - y)^2: {with_se(f['risk'], None if exact else f['risk_se'])}{exact}{test}"
            + (f"; training loss {fmt(f['train_loss'])}" if f.get("train_loss") is not None else ""),
            f"overlaps: k.k* {fmt(f['k_kstar'])}, v.v* {fmt(f['v_vstar'])} (the predictor is the same at -k, "
            f"-v: the teacher is k.k* = v.v* = +-1); distance to the manifold "
            f"{fmt(f['manifold_distance'])} (v.k* {fmt(f['v_kstar'])}, v*.k {fmt(f['vstar_k'])}, "
            f"k.v {fmt(f['k_v'])})",
        ]

    def check_grad(self, cfg: Config, seed: int, h: float) -> GradCheck:
        from ..base import finite_difference_errors  # lazy
        from .reference import draw, grad, loss, teacher_directions  # lazy

        rng = np.random.default_rng(seed)
        n, L, d, lam = 6, 4, 7, 0.7
        k_star, v_star = teacher_directions(d, rng)
        X, y = draw(n, L, k_star, v_star, 0.8, 0.3, rng)
        k, v = rng.standard_normal(d), rng.standard_normal(d)
        errors = {}
        for att in ("erf", "softmax", "linear"):
            errors[att] = finite_difference_errors(
                lambda k_, v_, att=att: loss(X, y, k_, v_, lam, att),
                lambda k_, v_, att=att: grad(X, y, k_, v_, lam, att),
                {"k": k, "v": v},
                h=h,
            )
        head = [
            f"single_location: central differences of the mean squared loss, h = {h:g}, n={n} L={L} d={d}"
        ]
        return GradCheck(head, errors)


SPEC = SingleLocationSpec()
