"""The gradient-descent driver: owns the schedule, the log grid and snapshots.

The Numba kernel :func:`attnsim.kernels._gd_segment` advances the state between
log points (and keeps the in-loop records: first-fit steps and the cumulative
s_rel (1 - s_rel)); this module evaluates the metrics at each log point and
collects them into a :class:`Trajectory`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from . import kernels, metrics, theory
from .config import Config
from .data import Dataset
from .engines import Problem
from .population import Population, cached_sobol_normals

PROGRESS_CHUNK = 20_000
TEST_CHUNK = 4096  # test samples per evaluation chunk  # steps per kernel call when a progress bar is shown


class SimulationError(RuntimeError):
    """A run that failed (diverged); the command line exits with code 1."""


def log_grid(cfg: Config) -> np.ndarray:
    """Logged steps: always 0 and ``steps``; linear or geometric in between."""
    if cfg.log_scale == "linear":
        grid = np.arange(0, cfg.steps + 1, cfg.log_every)
    else:
        grid = np.geomspace(1, max(cfg.steps, 1), cfg.log_points - 1).round()
    return np.unique(np.concatenate([[0, cfg.steps], grid]).astype(np.int64))


def pop_indices(n_log: int, pop_log_points: int) -> np.ndarray:
    """Indices into the log grid where population metrics are evaluated:
    at most ``pop_log_points``, evenly spread, first and last included."""
    m = min(n_log, pop_log_points)
    return np.unique(np.linspace(0, n_log - 1, m).round().astype(np.int64))


@dataclass
class Trajectory:
    """Metrics over the log grid (arrays of length L = number of log points),
    plus per-sample end-of-run records."""

    arrays: dict[str, np.ndarray]
    fit_step: np.ndarray
    status: str = "ok"
    frozen_at: int | None = None
    warnings: list[str] = field(default_factory=list)
    state: dict[str, np.ndarray] = field(default_factory=dict)


class Recorder:
    """Evaluates and stores the metrics of a state at each log point."""

    def __init__(self, problem: Problem, ds: Dataset, cfg: Config, grid, pop, save_scores):
        self.pb, self.ds, self.cfg = problem, ds, cfg
        self.grid = grid
        self.pop = pop
        # population and test-set metrics are evaluated on this sparser grid
        self.pop_at_all = set(pop_indices(len(grid), cfg.pop_log_points).tolist())
        self.pop_at = self.pop_at_all if pop else set()
        self.save_scores = save_scores
        self.noisy = ds.noisy
        self.metrics = metrics.StateMetrics(ds.y, ds.y_clean, ds.roles)
        self.saturated_at: int | None = None  # first log step of the current saturated run
        self.logits: list[np.ndarray] = []  # (n, T) per log point, for the gaps
        self.rows: list[dict] = []
        self.extra: dict[str, list] = {"selected": [], "selected_role": [], "example_scores": []}
        if save_scores:
            self.extra["scores"] = []
        clean_idx = np.flatnonzero(~self.noisy)
        noisy_idx = np.flatnonzero(self.noisy)
        self.examples = np.array(
            [clean_idx[0] if clean_idx.size else -1, noisy_idx[0] if noisy_idx.size else -1]
        )

    def _forward(self, W, p, nu):
        """Scores, outputs and loss on the training set (logits and values kept)."""
        pb = self.pb
        n = pb.y.size
        z, u = (pb.X2 @ (W @ p)).reshape(n, -1), (pb.X2 @ nu).reshape(n, -1)
        self.logits.append(z)
        self.last_u = u
        return kernels.outputs(z, u, pb.y, self.cfg.loss)

    def record(self, j: int, W, p, nu, S_acc) -> dict:
        pb, ds = self.pb, self.ds
        with np.errstate(over="ignore", invalid="ignore"):
            s, f, L = self._forward(W, p, nu)
        if not np.isfinite(L):  # the state after the last update is only seen here
            raise SimulationError(f"diverged at step {int(self.grid[j])}: the training loss is not finite")
        self.last_f, self.last_s = f, s
        if np.sum(s.max(axis=1) == 1.0) * 2 >= s.shape[0]:
            if self.saturated_at is None:
                self.saturated_at = int(self.grid[j])
        else:
            self.saturated_at = None
        row = {"step": int(self.grid[j]), "train_loss": L}
        row.update(self.metrics.accuracy(f))
        if pb.X2_test is not None and j in self.pop_at_all:
            row.update(self.test_metrics(W, p, nu))
        row.update(self.metrics.role_scores(s))
        row.update(self.metrics.frak_s(S_acc))
        row["p_norm"] = float(np.linalg.norm(p))
        row["W_dev"] = float(np.linalg.norm(W - pb.W0))
        if j in self.pop_at:
            row.update(self.population(W, p, nu))
        _check_finite(row)
        self.rows.append(row)
        sel = s.argmax(axis=1)
        self.extra["selected"].append(sel)
        roles = ds.roles
        self.extra["selected_role"].append(
            roles[np.arange(sel.size), sel] if roles is not None else -np.ones_like(sel)
        )
        ex = np.full((2, s.shape[1]), np.nan)
        for a, i in enumerate(self.examples):
            if i >= 0:
                ex[a] = s[i]
        self.extra["example_scores"].append(ex)
        if self.save_scores:
            self.extra["scores"].append(s.copy())
        return row

    def test_metrics(self, W, p, nu) -> dict:
        """Loss and accuracy on the finite test set, in chunks of samples."""
        pb = self.pb
        T, m = pb.T, pb.y_test.size
        qk, vals = W @ p, np.empty(m)
        loss = 0.0
        for lo in range(0, m, TEST_CHUNK):
            hi = min(m, lo + TEST_CHUNK)
            rows = slice(lo * T, hi * T)
            z = pb.X2_test[rows] @ qk
            if pb.O_test is not None:
                z += pb.O_test[rows] @ p
            u = pb.X2_test[rows] @ nu
            _, f, L = kernels.outputs(z.reshape(-1, T), u.reshape(-1, T), pb.y_test[lo:hi], self.cfg.loss)
            vals[lo:hi] = pb.y_test[lo:hi] * f
            loss += L * (hi - lo)
        return {"test_loss": loss / m, "test_acc": float(np.mean(vals > 0))}

    def population(self, W, p, nu) -> dict:
        pb = self.pb
        qk, qq = pb.q_norm2(W, p)
        return self.pop.evaluate(
            qk @ pb.mu_pos, qk @ pb.mu_neg, qk @ nu, qq, nu @ pb.mu_pos, nu @ pb.mu_neg, nu @ nu
        )

    def arrays(self) -> dict[str, np.ndarray]:
        keys: dict[str, None] = {}
        for row in self.rows:
            keys.update(dict.fromkeys(row))
        out = {}
        for key in keys:
            vals = [row.get(key, np.nan) for row in self.rows]
            dtype = np.int64 if key == "step" or key in metrics.COUNT_KEYS else np.float64
            out[key] = np.asarray(vals, dtype=dtype)
        for key, vals in self.extra.items():
            out[key] = np.asarray(vals)
        out["example_index"] = self.examples
        gaps = theory.gap_summaries(
            np.asarray(self.logits), self.ds.roles, self.last_s, self.last_u, self.ds.y, self.noisy,
            per_sample=self.save_scores,
        )  # fmt: skip
        out.update(gaps)
        if self.save_scores:
            out["logits"] = np.asarray(self.logits)
        return out


# metrics that are NaN by design for an empty group (no noisy samples, say)
_MAY_BE_NAN = ("train_acc_clean", "train_acc_noisy", "train_acc_noisy_true", "score_")


def _check_finite(row: dict) -> None:
    """A metric that is inf or NaN (other than an empty group's) means the
    state overflowed float64: stop rather than report it."""
    for key, v in row.items():
        if not np.isfinite(v) and not (np.isnan(v) and key.startswith(_MAY_BE_NAN)):
            raise SimulationError(
                f"diverged by step {row['step']}: {key} = {v} overflows float64 (reduce lr)"
            )


def make_population(cfg: Config, ds: Dataset, rng) -> Population | None:
    if ds.population_reason is not None:
        return None
    roles = np.repeat(np.arange(4), ds.role_counts)
    zeta = cached_sobol_normals(cfg.seed, roles.size, cfg.pop_points, rng)
    return Population(roles, cfg.rho, ds.sigma, cfg.pop_points, rng, cfg.loss, zeta=zeta)


def run_gd(
    problem: Problem,
    ds: Dataset,
    cfg: Config,
    pop: Population | None,
    save_scores: bool = False,
    progress: bool | None = None,
) -> Trajectory:
    """Full-batch GD from the problem's initial state, logged on :func:`log_grid`."""
    grid = log_grid(cfg)
    rel = _relevant_mask(ds, problem)
    seg = kernels.Segment(
        problem.X2, problem.y, problem.W0, problem.p0, problem.nu0, problem.T,
        cfg.lr, cfg.train_set, cfg.loss, rel,
    )  # fmt: skip
    rec = Recorder(problem, ds, cfg, grid, pop, save_scores)
    bar = _progress_bar(cfg.steps, progress)
    traj_warnings: list[str] = []
    frozen_at = None
    S_frozen = incr = None
    step = 0
    for j, target in enumerate(grid):
        while frozen_at is None and step < target:
            chunk = min(target - step, PROGRESS_CHUNK if bar is not None else target - step)
            status, at = seg.advance(step, chunk)
            if status == kernels.DIVERGED:
                raise SimulationError(
                    f"diverged at step {at}: the training loss is not finite (reduce lr={cfg.lr:g})"
                )
            if status == kernels.FROZEN:
                frozen_at = at
                incr = _s_increment(seg, rel, problem.T)
                S_frozen = seg.S_acc.copy()
                msg = f"frozen after step {at}: every gradient underflows to 0 (reduce lr)"
                traj_warnings.append(msg)
                warnings.warn(msg, stacklevel=2)
                break
            if bar is not None:
                bar.update(at - step)
            step = at
        S = seg.S_acc if frozen_at is None else S_frozen + incr * (target - frozen_at - 1)
        rec.record(j, seg.W, seg.p, seg.nu, S)
    if bar is not None:
        bar.close()
    # in-loop fit record, closed with the final state
    fit = seg.fit_since.copy()
    fitted_now = ds.y * rec.last_f > 0  # the last log point is the final state
    fit[~fitted_now] = -1
    fit[fitted_now & (fit < 0)] = cfg.steps
    return _finish(rec, ds, cfg, fit, frozen_at, traj_warnings, {"W": seg.W, "p": seg.p, "nu": seg.nu})


def run_flow(
    problem: Problem,
    ds: Dataset,
    cfg: Config,
    pop: Population | None,
    save_scores: bool = False,
    progress: bool | None = False,
) -> Trajectory:
    """Gradient flow d theta/dt = -grad L with t = lr * step, integrated by
    scipy's explicit Runge-Kutta (``flow_method``) from log point to log point;
    only metrics are kept. First-fit steps have the log grid's resolution."""
    from scipy.integrate import solve_ivp

    grid = log_grid(cfg)
    rel = _relevant_mask(ds, problem)
    field = kernels.FlowField(
        problem.X2, problem.y, problem.W0, problem.p0, problem.nu0, problem.T,
        cfg.lr, cfg.train_set, cfg.loss, rel,
    )  # fmt: skip
    rec = Recorder(problem, ds, cfg, grid, pop, save_scores)
    theta = field.pack(problem.W0, problem.p0, problem.nu0, np.zeros(ds.y.size))
    fit = -np.ones(ds.y.size, dtype=np.int64)
    for j, target in enumerate(grid):
        if j > 0:
            span = (cfg.lr * grid[j - 1], cfg.lr * target)
            try:
                with np.errstate(over="ignore", invalid="ignore"):
                    sol = solve_ivp(
                        field, span, theta, method=cfg.flow_method, rtol=cfg.flow_rtol, atol=cfg.flow_atol
                    )
            except kernels.EvaluationBudgetExceeded as exc:
                raise SimulationError(
                    f"gradient flow stalled between steps {grid[j - 1]} and {target} (at step "
                    f"{exc.args[0] / cfg.lr:.4g}): {field.max_evals} evaluations of the vector field; the "
                    f"logits are too large for the step-size control (reduce lr={cfg.lr:g} or steps)"
                ) from None
            if not sol.success or not np.all(np.isfinite(sol.y[:, -1])):
                raise SimulationError(
                    f"diverged between steps {grid[j - 1]} and {target}: gradient flow failed ({sol.message})"
                )
            theta = sol.y[:, -1]
        W, p, nu, S = field.unpack(theta)
        rec.record(j, W, p, nu, S)
        fitted = ds.y * rec.last_f > 0
        fit = np.where(fitted, np.where(fit < 0, target, fit), -1)
    W, p, nu, _ = field.unpack(theta)
    return _finish(rec, ds, cfg, fit, None, [], {"W": W, "p": p, "nu": nu})


def _relevant_mask(ds: Dataset, problem: Problem) -> np.ndarray:
    if ds.roles is None:
        return np.zeros(ds.y.size * problem.T)
    return (ds.roles == 0).astype(np.float64).reshape(-1)


def _finish(rec: Recorder, ds: Dataset, cfg: Config, fit, frozen_at, traj_warnings, state) -> Trajectory:
    if frozen_at is None and rec.saturated_at is not None:
        n_hot = int(np.sum(rec.last_s.max(axis=1) == 1.0))
        msg = (
            f"attention saturated: {n_hot} of {ds.y.size} training samples have one-hot scores "
            f"in float64 by step {rec.saturated_at}, so their gradients vanish; "
            f"the first logit step grows like lr*sigma^2*d: reduce lr (lr={cfg.lr:g}, d={cfg.d})"
        )
        traj_warnings.append(msg)
        warnings.warn(msg, stacklevel=3)
    return Trajectory(
        arrays=rec.arrays(),
        fit_step=fit,
        status="frozen" if frozen_at is not None else "ok",
        frozen_at=frozen_at,
        warnings=traj_warnings,
        state=state,
    )


def _s_increment(seg: kernels.Segment, rel: np.ndarray, T: int) -> np.ndarray:
    s = seg.s.reshape(-1, T)
    sr = (s * rel.reshape(-1, T)).sum(axis=1)
    return sr * (1.0 - sr)


def _progress_bar(steps: int, progress: bool | None):
    if progress is False or steps < 10 * PROGRESS_CHUNK:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=steps, unit="step", disable=None if progress is None else not progress)


__all__ = ["Trajectory", "run_gd", "run_flow", "log_grid", "pop_indices", "SimulationError"]
