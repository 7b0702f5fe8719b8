"""Positional and semantic attention as attnsim runs it: the ModelSpec (its planning needs the
config alone; the data, kernels and stepper load with the methods that run the model, "lazy")."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import registry
from ...config import Config
from ..base import ConfigError, GradCheck, ModelSpec, Own, Theory, TheoryError
from ..own import OwnData, fmt, spread, with_se

if TYPE_CHECKING:  # names in annotations only
    from ...data.dataset import Streams
    from ...runtime.workspace import Workspace

REASON = "positional_semantic runs on the (n T x d) tokens, one fused pass per step"


class Problem:
    engine = "dense"
    reason = REASON

    def __init__(
        self, cfg: Config, train: Any, test: Any, Q_star: np.ndarray, Q0: np.ndarray, init_stream: Any
    ) -> None:
        self.train, self.test, self.Q_star, self.Q0 = train, test, Q_star, Q0
        self.init_stream = init_stream  # the linear baseline's B(0) is drawn from it, after Q(0)
        self.T, self.y = cfg.T, None
        self.info = {"test_n": cfg.test_n}
        self.linear: dict = {}

    def stepper(self, cfg: Config, rel: Any = None, y: Any = None) -> Any:
        from .model import PSStepper  # lazy

        return PSStepper(
            self.train, self.Q0, self.Q_star, registry.make_optimizer(cfg), registry.weight_decay(cfg)
        )

    def evaluator(self, cfg: Config, pop: Any) -> Any:
        from .model import Evaluator  # lazy

        return Evaluator(pop, self.test)

    def objective(self, cfg: Config, state: dict, y: Any) -> float:
        from .reference import objective, positions, teacher  # lazy

        X = self.train.X
        xi = X - positions(cfg.T, cfg.d)
        Y = teacher(xi, self.Q_star, cfg.omega, np.asarray(cfg.teacher_A))
        return objective(X, Y, np.asarray(state["Q"]), registry.weight_decay(cfg))


class PositionalSemanticSpec(ModelSpec):
    name = "positional_semantic"
    classifier = False
    plot_groups = (
        ("error per sample", ("gen_error", "test_error"), True),
        ("overlaps", ("theta", "magnetization"), False),
        ("training objective", ("train_objective", "train_loss_sum"), False),
    )
    integrators = ("gd",)  # what its problem builds a stepper for
    warm_configs = {
        "gd": {"model": "positional_semantic", "n": 6, "d": 8, "steps": 2, "test_n": 4, "pop_points": 64}
    }

    def gradient_cases(self, engine: str) -> list[tuple[str, dict]]:
        small = {**self.warm_configs["gd"], "lr": 0.05}
        return [
            ("semantic", small),
            ("positional, T = 3, r = 2", {**small, "T": 3, "rank": 2, "init": "positional",
                                          "teacher_A": [[0.5, 0.3, 0.2], [0.2, 0.5, 0.3], [0.3, 0.2, 0.5]]}),
        ]  # fmt: skip

    def plan(self, cfg: Config, user_data: bool) -> tuple[str, str]:
        if user_data:
            raise ConfigError("data: positional_semantic draws its own data (no data file)")
        return "dense", REASON

    def memory_estimate(self, cfg: Config, engine: str, save_scores: bool = False) -> list:
        T, d = cfg.T, cfg.d
        return [
            ("n, T, d", f"the training tokens (n*T*d = {cfg.n}*{T}*{d} floats)", 8.0 * cfg.n * T * d),
            (
                "test_n, T, d",
                f"the test tokens (test_n*T*d = {cfg.test_n}*{T}*{d} floats)",
                8.0 * cfg.test_n * T * d,
            ),
            ("pop_points, T", "the population draws", 8.0 * cfg.pop_points * T * (1 + 2 * cfg.rank) * 4),
        ]

    def step_flops(self, cfg: Config, engine: str) -> float:
        return 4.0 * cfg.n * cfg.T * cfg.d * cfg.rank

    def setup_flops(self, cfg: Config, engine: str) -> float:
        return 30.0 * (cfg.n + cfg.test_n) * cfg.T * cfg.d

    def run_flops(self, cfg: Config, engine: str) -> float:
        return cfg.steps * self.step_flops(cfg, engine)

    def setup_key(self, cfg: Config) -> tuple:
        return (cfg.seed, cfg.n, cfg.T, cfg.d, cfg.rank, cfg.omega, cfg.sigma, cfg.teacher_A, cfg.test_n)

    def build(
        self, cfg: Config, ds: Any, streams: Streams, engine: str, reason: str, ws: Workspace
    ) -> tuple[Problem, OwnData]:
        from .model import draw, initial_Q  # lazy

        Q_star = streams.data.standard_normal((cfg.d, cfg.rank))
        train = draw(cfg.n, cfg, Q_star, streams.data)
        test = draw(cfg.test_n, cfg, Q_star, streams.test) if cfg.test_n else None
        Q0 = initial_Q(cfg, Q_star, streams.init)
        problem = Problem(cfg, train, test, Q_star, Q0, streams.init)
        source = f"generated: Cui et al. (2024), {cfg.n} samples of T = {cfg.T} tokens in d = {cfg.d}"
        return problem, OwnData(source, {"Q_star": Q_star})

    def population(self, cfg: Config, ds: OwnData, rng: np.random.Generator, ws: Workspace) -> Any:
        from .model import Population  # lazy

        return Population(cfg, ds.arrays["Q_star"], rng)

    def findings(self, problem: Problem, traj: Any, cfg: Config, pop: Any) -> Own:
        from .model import linear_baseline  # lazy

        lin = linear_baseline(problem.train, cfg.n, cfg, problem.init_stream, pop)
        own = super().findings(problem, traj, cfg, pop)  # every metric's last finite value
        final = {**own.final, "linear_gen_error": lin["linear_gen_error"]}
        final.update(linear_gen_error_se=lin["linear_gen_error_se"])
        final["teacher_norm"] = float((problem.Q_star**2).sum() / problem.Q_star.size)
        notes = {
            **own.notes,
            "test_set": f"{cfg.test_n} fresh samples from the run's test stream (seed {cfg.seed})"
            if cfg.test_n
            else None,
            "linear_baseline": "B xi, B (T x T) from N(0, 1), Adam lr 0.5, L2 1e-4, 200 steps (as published)",
        }
        return Own(traj, final, notes, {"linear_B": lin["B"]})

    def summary(self, res: Any) -> list[str]:
        c, f = res.config, res.final
        alpha = f" (alpha = {c['n'] / c['d']:.4g})"
        decay = "AdamW's decoupled" if c["optimizer"] == "adam" else "L2 (torch SGD's)"
        return [
            f"data: Cui et al. (2024) positional/semantic attention, n = {c['n']}{alpha}, T = {c['T']}, "
            f"d = {c['d']}, sigma = {c['sigma']:g}, omega = {c['omega']:g}, rank {c['rank']}; "
            f"Q(0) {c['init']}; lr {c['lr']:g}, {decay} weight decay {c['weight_decay']:g}",
            "generalization error per sample |Y_hat - Y|^2/(2d): "
            f"{with_se(f['gen_error'], f['gen_error_se'])} (population){_test(f, c)}; "
            "the learned linear baseline "
            f"{with_se(f['linear_gen_error'], f['linear_gen_error_se'])}",
            f"overlaps: magnetization |1'Q|/d {fmt(f['magnetization'])} (positional), "
            f"theta |Q*'Q|/d {fmt(f['theta'])} (semantic), |Q| {fmt(f['q_norm'])}",
            f"training: objective {fmt(f['train_objective'])} (the summed loss {fmt(f['train_loss_sum'])} "
            "+ (lambda/2)|Q|^2)",
        ]

    def seeds_summary(self, runs: list) -> list[str]:
        finals = [r.final for r in runs]
        lines = [f"  {name} {spread([f.get(name) for f in finals])}" for name in PUBLISHED]
        return lines + published_comparison(runs)

    def theory(self, values: dict, options: dict, progress: Any) -> Theory:
        """The replica fixed point of one branch (Cui et al.'s Result 4.2; :mod:`.replica`)."""
        from . import replica  # lazy

        other = sorted(set(values) - set(THEORY_KEYS))
        if other:
            raise TheoryError(
                f"--set {other[0]}: the theory (d -> infinity, T = 2, rank 1) takes only "
                f"{', '.join(THEORY_KEYS)}"
            )
        int_tol = options.get("int_tol", 3e-2)
        if not (math.isfinite(int_tol) and 0 < int_tol < 1):
            raise TheoryError(f"--int-tol: must be in (0, 1), got {int_tol}")
        try:
            settings = replica.Settings(**values)
        except replica.ReplicaError as exc:
            raise TheoryError(f"--set {exc}") from None
        if options.get("transition"):
            return _transition(values, options, progress)
        branch, rule = options.get("branch", "semantic"), options.get("rule", "gauss-hermite")
        sol = replica.solve(settings, branch, rule, int_tol=int_tol, progress=progress)
        if not sol.converged:
            return Theory([], sol.as_dict(), False, sol.message)
        accuracy = (
            f"integration: Gauss-Hermite order {sol.order}, the answer moved {sol.integration_error:.2g} "
            "relative from the order before (its accuracy at best; --int-tol asks for less)"
            if sol.integration_error is not None
            else "integration: the published notebook's fixed rules (no accuracy claim)"
        )
        emp = sol.empirical()
        lines = [
            f"{branch} branch at alpha = {settings.alpha:g}, omega = {settings.omega:g}, sigma = "
            f"{settings.sigma:g}, lambda = {settings.weight_decay:g} ({sol.iterations} iterations)",
            f"q = {sol.q:.6g}, m = {sol.m:.6g}, V = {sol.V:.6g}, theta = {sol.theta:.6g}, "
            f"mse = {sol.mse:.6g}, Phi = {sol.Phi:.6g}",
            f"empirical units: gen error {emp['gen_error']:.6g}, theta / sigma^2 {emp['theta']:.6g}, "
            f"magnetization {emp['magnetization']:.6g}, "
            f"train objective / d {emp['train_objective_per_d']:.6g}",
            accuracy,
        ]
        return Theory(lines, sol.as_dict())

    def check_grad(self, cfg: Config, seed: int, h: float) -> GradCheck:
        from ..base import finite_difference_errors  # lazy
        from .reference import grad, loss, positions, teacher  # lazy

        rng = np.random.default_rng(seed)
        errors = {}
        for T, r in ((2, 1), (3, 2)):
            n, d = 5, 7
            A = rng.uniform(0.1, 1.0, (T, T))
            xi = 0.5 * rng.standard_normal((n, T, d))
            X, Qs, Q = xi + positions(T, d), rng.standard_normal((d, r)), rng.standard_normal((d, r))
            Y = teacher(xi, Qs, 0.3, A)
            errors[f"T={T}, r={r}"] = finite_difference_errors(
                lambda Q_, X=X, Y=Y: loss(X, Y, Q_), lambda Q_, X=X, Y=Y: [grad(X, Y, Q_)], {"Q": Q}, h=h
            )
        head = [f"positional_semantic: central differences of the summed loss, h = {h:g}, n=5 d=7"]
        return GradCheck(head, errors)


def _test(f: dict, c: dict) -> str:
    return "" if f.get("test_error") is None else f", {fmt(f['test_error'])} on {c['test_n']} test samples"


THEORY_KEYS = ("alpha", "omega", "sigma", "weight_decay", "teacher_A")  # what `attnsim theory` takes

# the metrics of the published table, in its order (what --seeds summarizes)
PUBLISHED = ("gen_error", "test_error", "magnetization", "theta", "train_objective", "linear_gen_error")

SPEC = PositionalSemanticSpec()


PUBLISHED_RUNS = 24  # the runs behind each row of Cui et al.'s GD table (its README)
PUBLISHED_D = 1000  # the dimension of every row
NEAR = 0.02  # a published row within 2% of the run's alpha is its row (their alphas are rounded)


def published_comparison(runs: list) -> list[str]:
    """The published GD row nearest the seeds' setting (same init and omega, alpha within 2%, their
    sigma, lambda, T = 2 and A), each metric's z = (mean - published)/sqrt(sd^2/k + sd_pub^2/24)
    over the k seeds, and the teacher draws' mean |Q*|^2/d, which moves every metric of a seed
    together (docs/positional-semantic.md); [] where no published row matches."""
    from .keys import TEACHER_A  # lazy
    from .published_data import gd_table  # lazy

    c = runs[0].config
    standard = [list(r) for r in c["teacher_A"]] == [list(r) for r in TEACHER_A]
    if c["T"] != 2 or c.get("rank", 1) != 1 or not standard:
        return []
    alpha = c["n"] / c["d"]
    rows = [
        (a, row)
        for (init, a, omega), row in gd_table(c["sigma"], c["weight_decay"]).items()
        if init == c["init"] and abs(omega - c["omega"]) < 1e-9 and abs(a - alpha) <= NEAR * alpha
    ]
    if not rows:
        return []
    a, row = min(rows, key=lambda r: abs(r[0] - alpha))
    if c["d"] != PUBLISHED_D:  # the objective is a sum over n = alpha d samples; finite-d shifts the rest
        return [f"  published: the row at alpha {a:g} is at d = {PUBLISHED_D}; run that d to compare"]
    near = "" if abs(a - alpha) < 1e-9 else f" (the nearest row to this run's alpha {alpha:.4g})"
    k = len(runs)
    lines = [f"  published (Cui et al. 2024, GD at d = 1000, {PUBLISHED_RUNS} runs, alpha {a:g}){near}:"]
    for name, (pub, sd_pub) in row.items():
        x = np.array([f.get(name) for f in (r.final for r in runs)], dtype=float)
        x = x[np.isfinite(x)]
        if not x.size:
            continue
        # one seed has no spread of its own: the published runs' stands in for it
        var = (np.var(x, ddof=1) / x.size if x.size > 1 else sd_pub**2) + sd_pub**2 / PUBLISHED_RUNS
        z = (x.mean() - pub) / math.sqrt(var)
        here = f"{x.mean():.4g} here, {pub:.4g} +- {sd_pub:.2g} (sd) published"
        lines.append(f"    {name}: {here}; z = {z:+.2f}")
    norms = np.array([r.final.get("teacher_norm", np.nan) for r in runs], dtype=float)
    if np.isfinite(norms).all():
        sd = math.sqrt(2.0 / c["d"])  # |Q*|^2/d is a chi-square over d: mean 1, sd sqrt(2/d)
        off = (norms.mean() - 1) / (sd / math.sqrt(k))
        lines.append(
            f"    teacher draws: mean |Q*|^2/d {norms.mean():.4f} over {k} seed(s) ({off:+.1f} standard "
            "errors from 1); every metric moves with it (docs/positional-semantic.md)"
        )
    if k == 1:
        lines.append("    (one seed: its spread taken as the published runs'; run more seeds with --seeds)")
    return lines


TRANSITION_XTOL = 1e-3  # Brent's tolerance on alpha_c (the answer is given with it)


def _transition(values: dict, options: dict, progress: Any) -> Theory:
    """alpha_c(omega) where the semantic and positional branches' Phi cross (Cui et al.'s first-order
    transition), searched by Brent's method in [0.8, 1.25] times the published line at omega."""
    from . import replica_phases  # lazy
    from .published_data import TRANSITION  # lazy

    if options.get("branch") is not None or "alpha" in values:
        raise TheoryError("--transition: finds alpha itself, over both branches (drop --branch and alpha)")
    omega = float(values.get("omega", 0.3))
    rule = options.get("rule", "published")
    known = sorted(TRANSITION)
    if not known[0] <= omega <= known[-1]:
        raise TheoryError(
            f"--transition: omega = {omega:g} is outside the published line's range "
            f"[{known[0]:g}, {known[-1]:g}], which brackets the search"
        )
    guess = float(np.interp(omega, known, [TRANSITION[o] for o in known]))
    lo, hi = 0.8 * guess, 1.25 * guess
    settings = {k: v for k, v in values.items() if k in ("sigma", "weight_decay", "teacher_A")}
    kw = {"rule": rule} if rule == "published" else {"rule": rule, "order": 12}
    progress(f"alpha_c at omega = {omega:g}: Brent's method on [{lo:.4g}, {hi:.4g}], {rule} rules")
    alpha_c = replica_phases.transition(omega, lo, hi, xtol=TRANSITION_XTOL, settings=settings, **kw)
    data = {"omega": omega, "alpha_c": alpha_c, "xtol": TRANSITION_XTOL, "rule": rule,
            "published_line": guess, "bracket": [lo, hi]}  # fmt: skip
    if alpha_c is None:
        return Theory([], data, False, f"the branches' free energies do not cross in [{lo:.4g}, {hi:.4g}]")
    line = f"alpha_c(omega = {omega:g}) = {alpha_c:.4f} +- {TRANSITION_XTOL:g} ({rule} rules"
    line += ", Gauss-Hermite order 12)" if rule != "published" else ")"
    return Theory([line, f"the published line (their spinodal list, interpolated): {guess:.4f}"], data)
