"""Multi-head linear attention in context as attnsim runs it (SPEC §21b): the ModelSpec (its
planning needs the config alone; the data and steppers load with the methods that run the model,
"lazy")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...config import Config
from ..base import ConfigError, GradCheck, ModelSpec, Own, Theory, TheoryError
from ..own import OwnData, fmt

if TYPE_CHECKING:  # names in annotations only
    from ...data.dataset import Streams
    from ...runtime.workspace import Workspace

REASON = "linear_attention runs on the loss as a quadratic in T = sum_i c_i B_i: D^2 x D^2 moments"
THEORY_KEYS = ("d", "context", "spectrum")


class Problem:
    """Lambda's eigenvalues, the population moments (and a sample's with n > 0), the initial heads."""

    engine = "moments"
    reason = REASON
    y = None
    T = 1

    def __init__(self, cfg: Config, streams: Streams) -> None:
        from .model import initial  # lazy
        from .reference import Moments, cubic_features, draw, eigenvalues, saddle_losses  # lazy

        self.lam = eigenvalues(cfg.d, cfg.spectrum)
        self.saddles = saddle_losses(self.lam, cfg.context)
        self.population = Moments.population(self.lam, cfg.context)
        self.train = None
        if cfg.n:
            X, Y, xq, yq = draw(cfg.n, cfg.context, self.lam, streams.data)
            self.train = Moments.sample(cubic_features(X, Y, xq), xq, yq)
        self.objective_moments = self.train if self.train is not None else self.population
        self.params0 = initial(cfg, streams.init)
        self.info = {"sequences": cfg.n or "the population"}

    def stepper(self, cfg: Config, rel: Any = None, y: Any = None) -> Any:
        from .model import GD, Flow  # lazy

        return Flow(self, cfg) if cfg.integrator == "flow" else GD(self, cfg)

    def evaluator(self, cfg: Config, pop: Any) -> None:
        return None  # the population loss is exact at every log point (the stepper's metrics)

    def objective(self, cfg: Config, state: dict, y: Any) -> float:
        from .reference import product  # lazy

        return self.objective_moments.loss(product(state, cfg.parametrization))


class LinearAttentionSpec(ModelSpec):
    name = "linear_attention"
    classifier = False
    integrators = ("flow", "gd")
    plot_groups = (
        ("population loss and the training loss", ("population_loss", "train_loss"), True),
        ("|T|", ("t_norm",), True),
        ("population loss", ("population_loss",), False),
    )
    _small = {"model": "linear_attention", "d": 3, "context": 5, "heads": 2, "init_scale": 0.3}
    warm_configs = {
        "flow": {**_small, "integrator": "flow", "steps": 4, "log_scale": "linear", "log_every": 1},
        "gd": {**_small, "integrator": "gd", "n": 50, "steps": 4, "log_scale": "linear", "log_every": 1},
    }

    def gradient_cases(self, engine: str) -> list[tuple[str, dict]]:
        gd = {**self.warm_configs["gd"], "lr": 0.5}
        return [("separate, rank 2", {**gd, "rank": 2}), ("merged", {**gd, "parametrization": "merged"})]

    def plan(self, cfg: Config, user_data: bool) -> tuple[str, str]:
        if user_data:
            raise ConfigError("data: linear_attention draws its own sequences (no data file)")
        return "moments", REASON

    def memory_estimate(self, cfg: Config, engine: str, save_scores: bool = False) -> list:
        D = cfg.d
        out = [("d", f"the loss's moments ({D**4} floats)", 8.0 * D**4)]
        if cfg.n:
            out.append(("n, context, d", "a sample's sequences", 8.0 * cfg.n * (cfg.context + 2) * D))
        return out

    def step_flops(self, cfg: Config, engine: str) -> float:
        return 4.0 * cfg.d**4 + 10.0 * cfg.heads * cfg.rank * cfg.d**2

    def setup_key(self, cfg: Config) -> tuple:
        return (cfg.seed, cfg.d, cfg.context, cfg.spectrum, cfg.n)

    def build(
        self, cfg: Config, ds: Any, streams: Streams, engine: str, reason: str, ws: Workspace
    ) -> tuple[Problem, OwnData]:
        problem = Problem(cfg, streams)
        on = f"{cfg.n} sequences" if cfg.n else "the population loss"
        source = (
            f"generated: Zhang et al. (2025) in-context regression, D = {cfg.d}, N = {cfg.context}, "
            f"{cfg.spectrum} spectrum; trained on {on}"
        )
        return problem, OwnData(source)

    def trained_blocks(self, cfg: Config, state: Any) -> tuple[str, ...]:
        return tuple(state)

    def findings(self, problem: Problem, traj: Any, cfg: Config, pop: Any) -> Own:
        from .model import plateaus  # lazy

        own = super().findings(problem, traj, cfg, pop)
        a = traj.arrays
        levels, exits, which = plateaus(
            a["step"], a["population_loss"], problem.saddles, tol=1e-3 if not cfg.n else 1e-2
        )
        final = {**own.final, "plateaus": levels, "plateau_steps": [e for e in exits if e is not None]}
        notes = {
            **own.notes,
            "saddles": "L(M_0) ... L(M_D), the population loss's saddles (attnsim theory linear_attention): "
            + ", ".join(f"{v:.10g}" for v in problem.saddles),
            "plateau_saddles": which,
            "plateaus": "stretches of at least 3 log points within 1e-3 (n > 0: 1e-2) of a saddle's level; "
            "the level at the stretch's flattest point, the first logged step after it",
        }
        return Own(traj, final, notes, {})

    def summary(self, res: Any) -> list[str]:
        c, f = res.config, res.final
        on = f"{c['n']} sequences" if c["n"] else "the population loss"
        how = {
            "flow": f"gradient flow on the population loss to t = {c['lr'] * c['steps']:g}",
            "gd": f"GD, lr {c['lr']:g}, {c['steps']} steps on {on}",
        }[c["integrator"]]
        sep = f"separate rank-{c['rank']} keys and queries"
        kq = "merged key-query" if c["parametrization"] == "merged" else sep
        train = f", training {fmt(f['train_loss'])}" if f.get("train_loss") is not None else ""
        left = ", ".join(f"{s:.4g}" for s in f["plateau_steps"])
        return [
            f"data: Zhang et al. (2025) in-context linear regression, D = {c['d']}, N = {c['context']}, "
            f"{c['spectrum']} spectrum; {c['heads']} heads, {kq}, init {c['init']} {c['init_scale']:g}",
            f"training: {how}",
            f"population loss {fmt(f['population_loss'])}{train}",
            "plateaus visited: "
            + (", ".join(f"{v:.6g}" for v in f["plateaus"]) or "none")
            + (f"; left at logged steps {left}" if left else ""),
        ]

    def theory(self, values: dict, options: dict, progress: Any) -> Theory:
        from .reference import eigenvalues, saddle_losses  # lazy

        other = sorted(set(values) - set(THEORY_KEYS))
        if other:
            raise TheoryError(f"--set {other[0]}: the saddles take only {', '.join(THEORY_KEYS)}")
        if options.get("transition"):
            raise TheoryError("--transition: linear_attention has no phase transition here")
        if any(options.get(k) is not None for k in ("branch", "rule", "int_tol")):
            raise TheoryError("--branch, --rule and --int-tol: the saddles' closed form takes none")
        try:
            cfg = Config(model="linear_attention", **values)
        except ConfigError as exc:
            raise TheoryError(f"--set {exc}") from None
        lam = eigenvalues(cfg.d, cfg.spectrum)
        s = saddle_losses(lam, cfg.context)
        data = {"d": cfg.d, "context": cfg.context, "spectrum": cfg.spectrum, "eigenvalues": lam.tolist(),
                "saddle_losses": s.tolist(), "global_minimum": float(s[-1])}  # fmt: skip
        lines = [
            f"Zhang et al. (2025), D = {cfg.d}, N = {cfg.context}, {cfg.spectrum} spectrum (trace 1): "
            "the population loss's saddles L(M_m), m principal directions learned",
            "  " + ", ".join(f"L(M_{m}) = {v:.10g}" for m, v in enumerate(s)),
            f"global minimum (Zhang, Frei and Bartlett) L(M_{cfg.d}) = {s[-1]:.10g}",
        ]
        return Theory(lines, data)

    def check_grad(self, cfg: Config, seed: int, h: float) -> GradCheck:
        from ..base import finite_difference_errors  # lazy
        from .reference import Moments, eigenvalues, grads, product  # lazy

        rng = np.random.default_rng(seed)
        D, H, r = 3, 2, 2
        mom = Moments.population(eigenvalues(D, "linear"), 5)
        errors = {}
        for kind, shapes in (("separate", {"c": (H,), "K": (H, r, D), "Q": (H, r, D)}),
                             ("merged", {"c": (H,), "B": (H, D, D)})):  # fmt: skip
            p = {k: rng.standard_normal(s) for k, s in shapes.items()}
            names = list(p)

            def loss(*vals, kind=kind, names=names):
                return mom.loss(product(dict(zip(names, vals)), kind))

            def grad(*vals, kind=kind, names=names):
                q = dict(zip(names, vals))
                g = grads(q, kind, mom.grad_T(product(q, kind)))
                return [g[k] for k in names]

            errors[kind] = finite_difference_errors(loss, grad, p, h=h)
        return GradCheck(
            [f"linear_attention: central differences of the population loss, h = {h:g}, D={D} H={H}"], errors
        )


SPEC = LinearAttentionSpec()
