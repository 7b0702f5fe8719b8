"""The driver: owns the schedule, the log grid and the snapshots.

A model supplies a *stepper* (:class:`Stepper`): it advances its state k
steps in place (gradient-descent steps, or the gradient flow over the same
span of time, see :class:`GradientFlow`), shows the current state on the
training set, and hands out its parameters. An *evaluator* (a function of the
parameters) measures the state on fresh data: population metrics, a finite
test set. The driver knows nothing else about the model, so every model runs
through :func:`run`.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from . import SimulationError, metrics, theory
from .config import Config
from .kernels import DIVERGED, FROZEN, EvaluationBudgetExceeded, Observation

PROGRESS_CHUNK = 20_000  # GD steps per kernel call while a progress bar exists (flows are never cut)
RECORD_CHUNK = 64  # log points whose score metrics are computed at once


class Stepper(Protocol):
    """What the driver needs of a model.

    ``fit_since`` (n,): first step of each sample's current run of fitted
    states (-1 while unfitted), kept inside the step loop; ``S_acc`` (n,): the
    cumulative s_rel (1 - s_rel) in units of steps.
    """

    fit_since: np.ndarray
    S_acc: np.ndarray

    def advance(self, step0: int, nsteps: int) -> tuple[int, int]:
        """Move from state ``step0`` by ``nsteps`` steps: (status, step reached)."""

    def observe(self) -> Observation:
        """The current state on the training set."""

    def state(self) -> dict[str, np.ndarray]:
        """The current parameters (engine coordinates)."""

    def extra_metrics(self) -> dict[str, float]:
        """Model-specific scalars logged at every log point (norms, ...)."""

    def relevant_increments(self, s: np.ndarray) -> np.ndarray:
        """(n,) s_rel (1 - s_rel) of scores ``s``."""

    def snapshot(self):
        """A copy of the current state, for :meth:`restore`."""

    def restore(self, snap) -> None:
        """Go back to a state saved by :meth:`snapshot`."""


Evaluator = Callable[[dict], dict]  # parameters -> test-set and population metrics


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
    refined: dict[str, float | None] = field(default_factory=dict)  # times located between log points


# metrics that are NaN by design: for an empty group (no noisy samples, say), and the
# standard error of a population error the estimator could not resolve (then a bound)
_MAY_BE_NAN = ("train_acc_clean", "train_acc_noisy", "train_acc_noisy_true", "score_", "pop_error_se")


class Recorder:
    """Turns the observation of each log point into a row of metrics.

    The metrics of the scores and outputs are computed for many log points at
    once (:class:`attnsim.metrics.StateMetrics` on stacks of states): the
    observations wait in a buffer of at most ``RECORD_CHUNK`` log points.
    """

    def __init__(self, ds, grid: np.ndarray, save_scores: bool):
        self.ds, self.grid = ds, grid
        self.save_scores = save_scores
        self.noisy = ds.noisy
        self.metrics = metrics.StateMetrics(ds.y, ds.y_clean, ds.roles)
        self.logits: list[np.ndarray] = []  # (n, T) per log point, for the gaps
        self.rows: list[dict] = []  # per log point: step, loss, model scalars, evaluations
        self.columns: dict[str, list] = {}  # the metrics of the scores and outputs, per flushed chunk
        self.hot: list[np.ndarray] = []  # per chunk: whether half the samples have one-hot scores
        self.extra: dict[str, list] = {"selected": [], "selected_role": [], "example_scores": []}
        if save_scores:
            self.extra["scores"] = []
        self._buffer: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (s, f, S_acc) not yet measured
        clean_idx, noisy_idx = np.flatnonzero(~self.noisy), np.flatnonzero(self.noisy)
        self.examples = np.array(
            [clean_idx[0] if clean_idx.size else -1, noisy_idx[0] if noisy_idx.size else -1]
        )
        self.last: Observation | None = None

    def record(self, j: int, obs: Observation, S_acc: np.ndarray, extra: dict, evaluated: dict) -> None:
        step = int(self.grid[j])
        if not np.isfinite(obs.loss):  # the state after the last update is only seen here
            raise SimulationError(f"diverged at step {step}: the training loss is not finite")
        self.last = obs
        row = {"step": step, "train_loss": obs.loss}
        row.update(extra)
        row.update(evaluated)
        _check_finite(row)
        self.rows.append(row)
        self.logits.append(obs.z)
        self._buffer.append((obs.s, obs.f, S_acc.copy()))
        if len(self._buffer) >= RECORD_CHUNK:
            self._flush()

    def add(self, j: int, evaluated: dict) -> None:
        """Metrics of log point ``j`` that arrived after its row was recorded."""
        row = self.rows[j]
        row.update(evaluated)
        _check_finite(row)

    def _flush(self) -> None:
        """Measure the buffered log points at once."""
        if not self._buffer:
            return
        s, f, S_acc = (np.asarray(v) for v in zip(*self._buffer))  # (m, n, T), (m, n), (m, n)
        first = len(self.rows) - len(self._buffer)
        self._buffer = []
        vals = {**self.metrics.accuracy(f), **self.metrics.role_scores(s), **self.metrics.max_score(s),
                **self.metrics.frak_s(S_acc)}  # fmt: skip
        for key, v in vals.items():
            bad = _overflowed(key, v)
            if bad.any():
                raise _overflow(self.rows[first + int(np.argmax(bad))]["step"], key, v[bad][0])
            self.columns.setdefault(key, []).append(v)
        self.hot.append(np.sum(s.max(axis=2) == 1.0, axis=1) * 2 >= s.shape[1])
        sel = s.argmax(axis=2)
        self.extra["selected"].extend(sel)
        roles = self.ds.roles
        self.extra["selected_role"].extend(
            roles[np.arange(sel.shape[1]), sel] if roles is not None else -np.ones_like(sel)
        )
        ex = np.full((s.shape[0], 2, s.shape[2]), np.nan)
        for a, i in enumerate(self.examples):
            if i >= 0:
                ex[:, a] = s[:, i]
        self.extra["example_scores"].extend(ex)
        if self.save_scores:
            self.extra["scores"].extend(s)

    @property
    def saturated_at(self) -> int | None:
        """First log step of the final run of log points at which at least half
        the training samples have one-hot scores (None if the last is not one)."""
        self._flush()
        hot = np.concatenate(self.hot) if self.hot else np.zeros(0, dtype=bool)
        if hot.size == 0 or not hot[-1]:
            return None
        cold = np.flatnonzero(~hot)
        return self.rows[cold[-1] + 1 if cold.size else 0]["step"]

    def arrays(self) -> dict[str, np.ndarray]:
        self._flush()
        keys: dict[str, None] = {}
        for row in self.rows:
            keys.update(dict.fromkeys(row))
        out = {}
        for key in ("step", "train_loss"):
            out[key] = np.asarray(
                [row[key] for row in self.rows], dtype=np.int64 if key == "step" else np.float64
            )
        for key, parts in self.columns.items():
            out[key] = np.concatenate(parts).astype(np.int64 if key in metrics.COUNT_KEYS else np.float64)
        for key in keys:
            if key not in out:
                out[key] = np.asarray([row.get(key, np.nan) for row in self.rows], dtype=np.float64)
        for key, vals in self.extra.items():
            out[key] = np.asarray(vals)
        out["example_index"] = self.examples
        last = self.last
        gaps = theory.gap_summaries(
            np.asarray(self.logits),
            self.ds.roles,
            last.s,
            last.u,
            self.ds.y,
            self.noisy,
            per_sample=self.save_scores,
        )
        out.update(gaps)
        if self.save_scores:
            out["logits"] = np.asarray(self.logits)
        return out


def _check_finite(row: dict) -> None:
    """A metric that is inf or NaN (other than an empty group's) means the
    state overflowed float64: stop rather than report it."""
    for key, v in row.items():
        if not math.isfinite(v) and not (math.isnan(v) and key.startswith(_MAY_BE_NAN)):
            raise _overflow(row["step"], key, v)


def _overflowed(key: str, v: np.ndarray) -> np.ndarray:
    """Elementwise :func:`_check_finite`."""
    return ~np.isfinite(v) & ~(np.isnan(v) & key.startswith(_MAY_BE_NAN))


def _overflow(step: int, key: str, v) -> SimulationError:
    return SimulationError(f"diverged by step {step}: {key} = {v} overflows float64 (reduce lr)")


def run(
    stepper: Stepper,
    ds,
    cfg: Config,
    evaluate: Evaluator | None = None,
    save_scores: bool = False,
    progress: bool | None = None,
    watch: Callable[[dict], None] | None = None,
    refine: bool = False,
    meanwhile: Callable[[], None] | None = None,
) -> Trajectory:
    """Advance ``stepper`` along :func:`log_grid`, recording every log point;
    ``evaluate`` runs at the :func:`pop_indices` points (through its
    ``defer``, if it has one, on a second thread while the steps go on),
    ``watch`` (if given) sees the parameters at every log point. With
    ``refine`` the times at which the fresh relevant score last rises to
    ``gen_score`` and the population loss settles are located between log
    points (:func:`refine_crossing`). ``meanwhile`` (if given) is called once
    the steps are done, while the deferred evaluations finish on the other
    thread (the run's clean-label twin)."""
    grid = log_grid(cfg)
    at = set(pop_indices(len(grid), cfg.pop_log_points).tolist()) if evaluate is not None else set()
    defer = None if refine else getattr(evaluate, "defer", None)
    pending: list[tuple[int, object]] = []  # (log point, job) of deferred evaluations
    snaps: dict[int, object] = {}
    rec = Recorder(ds, grid, save_scores)
    bar = _progress_bar(cfg.steps, progress, cfg.log_scale == "log")
    # GD steps are exact in any chunks, so a bar may cut them; a flow is integrated
    # whole between log points and reports its progress from the solver's own steps
    flow = isinstance(stepper, GradientFlow)
    if flow and bar is not None:
        stepper.progress = bar.to
    traj_warnings: list[str] = []
    frozen_at = None
    S_frozen = incr = None
    step = 0
    try:
        for j, target in enumerate(grid):
            while frozen_at is None and step < target:
                chunk = min(target - step, PROGRESS_CHUNK if bar is not None and not flow else target - step)
                status, reached = stepper.advance(step, chunk)
                if status == DIVERGED:
                    raise SimulationError(
                        f"diverged at step {reached}: the training loss or a parameter norm is not finite "
                        f"(reduce lr={cfg.lr:g})"
                    )
                if status == FROZEN:
                    frozen_at = reached
                    incr = stepper.relevant_increments(stepper.observe().s)
                    S_frozen = stepper.S_acc.copy()
                    msg = f"frozen after step {reached}: every gradient underflows to 0 (reduce lr)"
                    traj_warnings.append(msg)
                    warnings.warn(msg, stacklevel=2)
                    break
                if bar is not None:
                    bar.to(reached)
                step = reached
            S = stepper.S_acc if frozen_at is None else S_frozen + incr * (target - frozen_at - 1)
            evaluated, job = {}, None
            if j in at and defer is not None:
                job = defer(stepper.state())
            elif j in at:
                with np.errstate(over="ignore", invalid="ignore"):
                    evaluated = evaluate(stepper.state())
            rec.record(j, stepper.observe(), S, stepper.extra_metrics(), evaluated)
            if job is not None:
                pending.append((j, job))
            if watch is not None:
                watch(stepper.state())
            if refine and j in at:
                snaps[int(target)] = stepper.snapshot()
        if meanwhile is not None:
            meanwhile()
        _collect(rec, pending)
    except SimulationError:
        _collect(rec, pending)  # an overflow at an earlier log point is the one to report
        raise
    finally:
        for _, job in pending:
            job.cancel()
        if bar is not None:
            bar.close()
        if flow:
            stepper.progress = None
    # the in-loop fit record, closed with the final state (the last log point)
    fit = stepper.fit_since.copy()
    fitted_now = ds.y * rec.last.f > 0
    fit[~fitted_now] = -1
    fit[fitted_now & (fit < 0)] = cfg.steps
    if frozen_at is None and rec.saturated_at is not None:
        n_hot = int(np.sum(rec.last.s.max(axis=1) == 1.0))
        msg = (
            f"attention saturated: {n_hot} of {ds.y.size} training samples have one-hot scores "
            f"in float64 by step {rec.saturated_at}, so their gradients vanish; "
            f"the first logit step grows like lr*sigma^2*d: reduce lr (lr={cfg.lr:g}, d={cfg.d})"
        )
        traj_warnings.append(msg)
        warnings.warn(msg, stacklevel=2)
    arrays = rec.arrays()
    state = stepper.state()
    if not getattr(state, "detached", False):  # the stepper's own arrays: copies outlive later steps
        state = {k: v.copy() for k, v in state.items()}
    refined = {}
    if refine and evaluate is not None and frozen_at is None and "pop_score_relevant" in arrays:
        refined = refine_times(stepper, snaps, arrays, evaluate, cfg)
    return Trajectory(
        arrays=arrays,
        fit_step=fit,
        status="frozen" if frozen_at is not None else "ok",
        frozen_at=frozen_at,
        warnings=traj_warnings,
        state=state,
        refined=refined,
    )


def _collect(rec: Recorder, pending: list) -> None:
    """Add the deferred evaluations to their rows, in log order (a metric that
    overflowed raises SimulationError naming its step)."""
    while pending:
        j, job = pending.pop(0)
        try:
            rec.add(j, job.result())
        except SimulationError:
            pending.clear()  # the later ones do not matter
            raise


def refine_crossing(stepper, snap, a: float, b: float, g: Callable[[dict], float], integer: bool) -> float:
    """The step in (a, b] where g(state) changes sign, g(a) < 0 <= g(b), by
    bisection: the stepper restarts from ``snap`` (its state at step a) and
    advances to each trial step. GD steps are integers (the exact first step
    with g >= 0); flow steps are real (to a relative 1e-6)."""

    def value(step: float) -> float:
        stepper.restore(snap)
        if step > a:
            stepper.advance(a, step - a)
        with np.errstate(over="ignore", invalid="ignore"):
            return g(stepper.state())

    if integer:
        a, b = int(a), int(b)
    lo, hi = a, b
    while (hi - lo > 1) if integer else (hi - lo > 1e-6 * hi):
        mid = (lo + hi) // 2 if integer else math.sqrt(lo * hi) if lo > 0 else 0.5 * hi
        if integer:
            mid = int(mid)
        if value(mid) >= 0.0:
            hi = mid
        else:
            lo = mid
    return hi


def refine_times(stepper, snaps: dict, arrays: dict, evaluate: Evaluator, cfg: Config) -> dict:
    """t_generalize (the fresh relevant score reaches ``gen_score`` for good)
    and t_pop_loss_settled (the population loss stays within 1% of its final
    value) between the population log points that bracket them."""
    steps = arrays["step"]
    out: dict[str, float | None] = {}
    integer = cfg.integrator == "gd"
    ok = np.isfinite(arrays["pop_score_relevant"])
    st, score, loss = steps[ok], arrays["pop_score_relevant"][ok], arrays["pop_loss"][ok]
    final_loss = loss[-1]
    checks = {
        "t_generalize": (score - cfg.gen_score, lambda s: evaluate(s)["pop_score_relevant"] - cfg.gen_score),
        "t_pop_loss_settled": (0.01 * abs(final_loss) - np.abs(loss - final_loss),
                               lambda s: 0.01 * abs(final_loss) - abs(evaluate(s)["pop_loss"] - final_loss)),
    }  # fmt: skip
    for name, (vals, g) in checks.items():
        if vals[-1] < 0:
            out[name] = None  # not within the horizon
            continue
        below = np.flatnonzero(vals < 0)
        if below.size == 0:
            out[name] = float(st[0])
            continue
        a, b = st[below[-1]], st[below[-1] + 1]
        out[name] = float(refine_crossing(stepper, snaps[int(a)], float(a), float(b), g, integer))
    return out


class GradientFlow:
    """A :class:`Stepper` that follows the gradient flow d theta/dt = -grad L
    of a vector field (t = lr * step) with scipy's explicit Runge-Kutta
    methods; ``advance`` integrates over the span of the requested steps, so
    GD and flow share one driver. First-fit steps have the resolution of the
    calls to ``advance`` (the log grid).

    ``field`` provides ``pack``, ``unpack``, ``__call__``, ``observe``,
    ``extra_metrics``, ``relevant_increments`` and ``max_evals`` (see
    :class:`attnsim.kernels.FlowField`).
    """

    def __init__(self, field, n: int, lr: float, method: str, rtol: float, atol: float):
        from scipy.integrate import solve_ivp

        self._solve = solve_ivp
        self.field, self.lr = field, lr
        self.method, self.rtol, self.atol = method, rtol, atol
        self.theta = field.pack(field.W, field.p, field.nu, np.zeros(n))
        self.fit_since = np.where(field.data.y * self.observe().f > 0, 0.0, -1.0)  # real steps (refined)
        self.progress: Callable[[float], None] | None = None  # called with the step the solver reached

    def _rhs(self, t: float, theta: np.ndarray) -> np.ndarray:
        """The vector field, reporting the solver's progress every 64 evaluations."""
        if self.progress is not None and self.field.evals % 64 == 0:
            self.progress(t / self.lr)
        return self.field(t, theta)

    @property
    def S_acc(self) -> np.ndarray:
        return self.field.unpack(self.theta)[3]

    def advance(self, step0: float, nsteps: float) -> tuple[int, float]:
        """Integrate from step0 over nsteps (real numbers of steps). A sample
        whose fit changes in the span gets the exact step of the change (a root
        of its margin on the solver's dense output, from a second integration)."""
        theta0 = self.theta
        sol = self._integrate(step0, nsteps, theta0, dense=False)
        self.theta = sol.y[:, -1]
        end = step0 + nsteps
        y = self.field.data.y
        was = self.fit_since >= 0
        fitted = y * self.observe().f > 0
        changed = np.flatnonzero(fitted & ~was)
        self.fit_since = np.where(fitted, self.fit_since, -1.0)
        if changed.size:
            dense = self._integrate(step0, nsteps, theta0, dense=True).sol
            for i in changed:
                self.fit_since[i] = self._last_rise(dense, i, step0, end)
        return 0, end

    def _integrate(self, step0: float, nsteps: float, theta0: np.ndarray, dense: bool):
        span = (self.lr * step0, self.lr * (step0 + nsteps))
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                sol = self._solve(
                    self._rhs,
                    span,
                    theta0,
                    method=self.method,
                    rtol=self.rtol,
                    atol=self.atol,
                    dense_output=dense,
                )
        except EvaluationBudgetExceeded as exc:
            raise SimulationError(
                f"gradient flow stalled between steps {step0:g} and {step0 + nsteps:g} (at step "
                f"{exc.args[0] / self.lr:.4g}): {self.field.max_evals} evaluations of the vector field; the "
                f"logits are too large for the step-size control (reduce lr={self.lr:g} or steps)"
            ) from None
        if not sol.success or not np.all(np.isfinite(sol.y[:, -1])):
            raise SimulationError(
                f"diverged between steps {step0:g} and {step0 + nsteps:g}: the flow failed ({sol.message})"
            )
        return sol

    def _last_rise(self, dense, i: int, a: float, b: float) -> float:
        """The step in (a, b] after which sample i stays fitted: the last zero of
        its margin y_i f_i on the dense output (scanned on 64 points, then
        bisected to a relative 1e-9)."""
        from scipy.optimize import brentq

        y = self.field.data.y[i]

        def margin(step: float) -> float:
            W, p, nu, _ = self.field.unpack(dense(self.lr * step))
            return float(y * self.field.observe(W, p, nu).f[i])

        grid = np.linspace(a, b, 65)
        vals = np.array([margin(t) for t in grid])
        neg = np.flatnonzero(vals <= 0)
        if neg.size == 0:
            return a
        lo = neg[-1]
        if lo == grid.size - 1:
            return b
        return float(brentq(margin, grid[lo], grid[lo + 1], xtol=1e-9 * max(1.0, grid[lo + 1])))

    def snapshot(self):
        return self.theta.copy(), self.fit_since.copy()

    def restore(self, snap) -> None:
        self.theta, self.fit_since = snap[0].copy(), snap[1].copy()

    def state(self) -> dict[str, np.ndarray]:
        W, p, nu, _ = self.field.unpack(self.theta)
        return {"W": W, "p": p, "nu": nu}

    def observe(self) -> Observation:
        return self.field.observe(**self.state())

    def extra_metrics(self) -> dict[str, float]:
        return self.field.extra_metrics(**self.state())

    def relevant_increments(self, s: np.ndarray) -> np.ndarray:
        return self.field.relevant_increments(s)


class _Bar:
    """A progress bar over steps, or over decades of steps for a log grid
    (position log10(1 + step): a flow to 1e14 spends its time evenly per
    decade), moved to absolute positions."""

    def __init__(self, steps: int, progress: bool | None, log: bool):
        from tqdm.auto import tqdm

        self.log = log
        total = math.log10(1.0 + steps) if log else steps
        fmt = "{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]"
        self._bar = tqdm(total=total, bar_format=fmt, disable=None if progress is None else not progress)
        self._bar.set_description_str(f"step 0 of {steps:.3g}", refresh=False)
        self.steps = steps
        self._shown = 0.0

    def to(self, step: float) -> None:
        bar = self._bar
        now = time.monotonic()
        if bar.disable or now - self._shown < 0.1:  # redrawn at most ten times a second
            return
        self._shown = now
        bar.n = math.log10(1.0 + step) if self.log else step
        bar.set_description_str(f"step {step:.3g} of {self.steps:.3g}")

    def close(self) -> None:
        bar = self._bar
        if not bar.disable:
            bar.n = bar.total
            bar.set_description_str(f"step {self.steps:.3g} of {self.steps:.3g}", refresh=False)
        bar.close()


def _progress_bar(steps: int, progress: bool | None, log: bool) -> _Bar | None:
    if progress is False or steps < 10 * PROGRESS_CHUNK:
        return None
    return _Bar(steps, progress, log)


__all__ = [
    "GradientFlow",
    "Recorder",
    "SimulationError",
    "Stepper",
    "Trajectory",
    "log_grid",
    "pop_indices",
    "run",
]
