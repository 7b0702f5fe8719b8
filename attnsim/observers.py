"""What the paper records at each log point: the observer the driver hands every
state to (:class:`Recorder`), and the times located between log points afterwards
(:func:`refine_times`). It needs of a stepper, besides the driver's protocol, the
in-loop records ``fit_since`` (n,: first step of each sample's current run of
fitted states, -1 while unfitted) and ``S_acc`` (n,: the cumulative
s_rel (1 - s_rel) in units of steps), and ``relevant_increments(s)``."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from . import metrics, theory
from ._meta import SimulationError
from .driver import refine_crossing
from .models.base import Observation, Outcome

if TYPE_CHECKING:  # names in annotations only
    from .data.dataset import Dataset

SINGLE_TOKEN = (
    "one token per sample (T = 1): its score is 1 whatever the state, so attention selects nothing "
    "and no gradient reaches W or p"
)
HUGE_TOKEN = 1e4  # a token entry this large, not lr, is what saturates the scores in one step
RECORD_CHUNK = 64  # log points whose score metrics are computed at once

# metrics that are NaN by design: for an empty group (no noisy samples, say), and the
# standard error of a population error the estimator could not resolve (then a bound)
_MAY_BE_NAN = ("train_acc_clean", "train_acc_noisy", "train_acc_noisy_true", "score_", "pop_error_se")


class Recorder:
    """Turns the observation of each log point into a row of metrics.

    The metrics of the scores and outputs are computed for many log points at
    once (:class:`attnsim.metrics.StateMetrics` on stacks of states): the
    observations wait in a buffer of at most ``RECORD_CHUNK`` log points.
    """

    quiet = False  # True: the run's warnings are returned, not also warned (a run on another thread)

    def __init__(
        self,
        ds: Dataset,
        grid: np.ndarray,
        save_scores: bool,
        lr: float,
        d: int,
        optimizer: str = "gd",
        logit_x_Wp: bool = True,
    ):
        self.ds, self.grid = ds, grid
        self.lr, self.d, self.optimizer = lr, d, optimizer  # for the saturation warning
        self.logit_x_Wp = logit_x_Wp  # the logits are x . W p (the advice's formulas); else another model's
        self.normalized = optimizer == "normalized"
        self._S_frozen: np.ndarray | None = None  # S_acc when the stepper froze, and its rate since
        self._incr: np.ndarray | None = None
        self._frozen_at: int | None = None
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

    def frozen(self, stepper: Any, step: int) -> str:
        """The stepper stopped moving after ``step``: its frakS keeps accumulating at the
        last rate. Returns the run's warning."""
        self._frozen_at = step
        s = stepper.observe().s
        self._incr = stepper.relevant_increments(s)
        self._S_frozen = stepper.S_acc.copy()
        return self._frozen_message(s, step)

    def _frozen_message(self, s: np.ndarray, step: int) -> str:
        """Why the state stopped moving: saturated scores (lr's fault, or the data's when
        they are one-hot from the start), or a gradient below the parameters' precision
        with no score saturated (the data or the initialization make it so; lr cannot)."""
        if s.shape[1] == 1:
            return SINGLE_TOKEN
        if self.normalized:
            return Outcome.FROZEN.message(step, normalized=True)
        one_hot = bool(np.all(np.max(s, axis=1) >= 1.0))
        X = self.ds.X
        big = float(np.max(np.abs(X))) if X is not None and X.size else 0.0
        if one_hot and step == 0:
            scale = f" (largest |x| entry {big:.3g})" if big else ""
            return (
                "frozen after step 0: every training sample's scores are one-hot in float64 at the "
                "initialization: its logits differ by more than float64 can weigh, which the data's "
                f"scale sets{scale}, not lr; rescale the tokens"
            )
        if one_hot and big > HUGE_TOKEN:
            return (
                f"frozen after step {step:g}: every gradient underflows to 0 once the scores are one-hot, "
                f"and the data's scale (largest |x| entry {big:.3g}; a logit step grows like lr |x|^2) "
                "got them there: rescale the tokens (or reduce lr by as much)"
            )
        if one_hot:
            return Outcome.FROZEN.message(step)
        return (
            f"frozen after step {step:g}: every update is below the parameters' float64 precision "
            "while no sample's scores are saturated, so the gradient itself is that small: the data "
            "or the initialization make it so (a signal_norm near 0, tokens of 0, a head that sees no "
            "difference between tokens, p(0) = 0 with W alone moving); a smaller lr cannot help"
        )

    def record(self, j: int, target: int, stepper: Any, evaluated: dict) -> None:
        """The state of ``stepper`` at log point ``j`` (step ``target``), with the metrics ``evaluated``."""
        if self._frozen_at is None:
            S_acc = stepper.S_acc
        else:
            S_acc = self._S_frozen + self._incr * (target - self._frozen_at - 1)
        self._record(j, stepper.observe(), S_acc, stepper.extra_metrics(), evaluated)

    def _record(self, j: int, obs: Observation, S_acc: np.ndarray, extra: dict, evaluated: dict) -> None:
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
        vals = {
            **self.metrics.accuracy(f),
            **self.metrics.role_scores(s),
            **self.metrics.max_score(s),
            **self.metrics.frak_s(S_acc),
        }
        for key, v in vals.items():
            bad = _overflowed(key, v)
            if bad.any():
                raise _overflow(self.rows[first + int(np.argmax(bad))]["step"], key, v[bad][0])
            self.columns.setdefault(key, []).append(v)
        self.hot.append(np.sum(_one_hot(s, self.normalized), axis=1) * 2 >= s.shape[1])
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

    @property
    def first_saturated_at(self) -> int | None:
        """First log step at which at least half the training samples had one-hot scores (None
        if none did): where saturation began, which :attr:`saturated_at` (the start of the last
        saturated stretch) may follow after the scores came back."""
        self._flush()
        hot = np.concatenate(self.hot) if self.hot else np.zeros(0, dtype=bool)
        first = np.flatnonzero(hot)
        return self.rows[first[0]]["step"] if first.size else None

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

    def finish(self, stepper: Any, steps: int) -> tuple[dict[str, np.ndarray], np.ndarray, list[str]]:
        """The metric arrays, each sample's first step of its final run of fitted
        states (the in-loop record closed with the final state; -1: not fitted),
        and the warnings of the run (attention saturated)."""
        fit = stepper.fit_since.copy()
        y = self.ds.y
        fitted_now = y * self.last.f > 0
        fit[~fitted_now] = -1
        fit[fitted_now & (fit < 0)] = steps
        out = []
        if self.last.s.shape[1] == 1:  # one token: its score is 1 whatever the state
            if self._frozen_at is not None:  # said by the driver, when the steps stopped moving
                return self.arrays(), fit, out
            out.append(SINGLE_TOKEN)
            if not self.quiet:
                warnings.warn(SINGLE_TOKEN, stacklevel=3)
        elif self._frozen_at is None and self.saturated_at is not None:
            n_hot = int(np.sum(_one_hot(self.last.s, self.normalized)))
            first, last = self.first_saturated_at, self.saturated_at
            since = (
                f"since step {last}"
                if first == last
                else f"since step {last} (half of them first saturated at step {first}, then recovered)"
            )
            head = (
                f"attention saturated: {n_hot} of {y.size} training samples have one-hot scores "
                f"in float64 at the end, half or more of them {since}"
            )
            if self.normalized:  # the steps keep their length: what is lost is the gradient's direction
                msg = (
                    f"{head} (every other score below exp(-745)), so their gradients are zero and "
                    "normalized steps follow the other samples alone from there on: read the "
                    "trajectory up to that step"
                )
            elif not self.logit_x_Wp:  # another model's logits: no formula of the attention model's
                msg = f"{head}, so their gradients vanish: reduce lr (lr={self.lr:g})"
            elif self.optimizer == "adam":  # each coordinate moves by about lr, whatever the gradient's size
                msg = (
                    f"{head}, so their gradients vanish; AdamW moves each coordinate by up to lr per step, "
                    f"so a logit x.Wp moves by up to about lr*|x|_1 (lr*sigma*d for Gaussian tokens): reduce "
                    f"lr (lr={self.lr:g}, d={self.d})"
                )
            else:
                msg = (
                    f"{head}, so their gradients vanish; the first logit step grows like lr*sigma^2*d: "
                    f"reduce lr (lr={self.lr:g}, d={self.d})"
                )
            out.append(msg)
            if not self.quiet:
                warnings.warn(msg, stacklevel=3)
        return self.arrays(), fit, out


def _one_hot(s: np.ndarray, exact: bool) -> np.ndarray:
    """Samples whose scores (last axis) are one-hot in float64: the top score
    rounds to 1 (plain GD's gradients are then below its step's resolution), or
    with ``exact`` every other score is 0 (the gradient itself is 0)."""
    return np.sum(s > 0.0, axis=-1) == 1 if exact else s.max(axis=-1) == 1.0


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


def refine_times(
    stepper: Any, snaps: dict, arrays: dict, evaluate: Callable[[dict], dict], gen_score: float, integer: bool
) -> dict:
    """t_select (the fresh relevant score reaches ``gen_score`` for good)
    and t_pop_loss_settled (the population loss stays within 1% of its final
    value) between the population log points that bracket them."""
    steps = arrays["step"]
    out: dict[str, float | None] = {}
    ok = np.isfinite(arrays["pop_score_relevant"])
    st, score, loss = steps[ok], arrays["pop_score_relevant"][ok], arrays["pop_loss"][ok]
    final_loss = loss[-1]
    checks = {
        "t_select": (score - gen_score, lambda s: evaluate(s)["pop_score_relevant"] - gen_score),
        "t_pop_loss_settled": (
            0.01 * abs(final_loss) - np.abs(loss - final_loss),
            lambda s: 0.01 * abs(final_loss) - abs(evaluate(s)["pop_loss"] - final_loss),
        ),
    }
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
