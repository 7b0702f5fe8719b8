"""What every model supplies, and what the rest of attnsim may assume of it.

A model is a folder under ``attnsim/models/`` whose package exposes ``SPEC``,
a :class:`ModelSpec`, and one line in :mod:`attnsim.registry`. The spec
validates the model's own keys, plans the engine and its resources, and builds
a :class:`Problem` from a dataset; the problem hands the driver a
:class:`Stepper` and an :class:`Evaluator`. Nothing outside the model's
folder branches on the model's name (docs/design.md: adding a model).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, Protocol

import numpy as np

Array = np.ndarray
OK, DIVERGED, FROZEN = 0, 1, 2  # what Stepper.advance reports (kernels return these codes)
GRAD_TOL = 1e-5  # check-grad: central differences at h = 1e-6 give about 1e-9; a wrong gradient gives O(1)


class Observation(NamedTuple):
    """A state seen on the training set: (n, T) logits, values and scores,
    (n,) outputs, the mean loss."""

    z: np.ndarray
    u: np.ndarray
    s: np.ndarray
    f: np.ndarray
    loss: float


class Stepper(Protocol):
    """What the driver needs of a model's training dynamics.

    ``whole_spans``: the stepper integrates each span between log points
    whole (a flow; the driver never cuts it for a progress bar) and reports
    its progress through ``progress`` (set by the driver, called with the
    step reached); GD steppers have it False.
    """

    whole_spans: bool
    progress: Callable[[float], None] | None

    def advance(self, step0: float, nsteps: float) -> tuple[int, float]:
        """Move from state ``step0`` by ``nsteps`` steps: (status, step reached)."""

    def observe(self) -> Observation:
        """The current state on the training set."""

    def state(self) -> Mapping[str, np.ndarray]:
        """The current parameters (engine coordinates; may be the stepper's own arrays)."""

    def final_state(self) -> dict[str, np.ndarray]:
        """The current parameters as arrays that later steps do not change."""

    def extra_metrics(self) -> dict[str, float]:
        """Model-specific scalars logged at every log point (norms, ...)."""

    def snapshot(self) -> Any:
        """A copy of the current state, for :meth:`restore`."""

    def restore(self, snap: Any) -> None:
        """Go back to a state saved by :meth:`snapshot`."""


class Job(Protocol):
    """A computation under way: ``result()`` waits for its value."""

    def result(self) -> dict: ...

    def cancel(self) -> Any: ...


class Evaluator(Protocol):
    """Measures a state on fresh data (population metrics, a finite test set)."""

    def __call__(self, state: Mapping[str, np.ndarray]) -> dict[str, float]: ...

    def defer(self, state: Mapping[str, np.ndarray]) -> Job:
        """The same metrics as a job, so the caller may move the state on at once."""


class Problem(Protocol):
    """One model's training problem in the coordinates its engine chose."""

    engine: str
    reason: str
    T: int
    y: np.ndarray
    info: dict

    def stepper(self, cfg: Any, rel: np.ndarray, y: np.ndarray | None = None) -> Stepper: ...

    def evaluator(self, cfg: Any, pop: Any) -> Evaluator | None: ...


class ModelSpec(Protocol):
    """A model as the rest of attnsim sees it (one instance per model: ``SPEC``)."""

    name: str

    def validate(self, cfg: Any, user_data: bool) -> None:
        """ConfigError for a key this model cannot run with."""

    def plan(self, cfg: Any, user_data: bool) -> tuple[str, str]:
        """The engine to use and why."""

    def check_resources(self, cfg: Any, engine: str, save_scores: bool) -> None:
        """ConfigError when the run would not fit in memory or time."""

    warm_configs: dict[str, dict]  # the tiny run per integrator that warms every kernel up

    def warm_up(self) -> None:
        """Load (or compile) the model's kernels and tables."""

    def build(
        self, cfg: Any, ds: Any, streams: Any, engine: str, reason: str, ws: Any
    ) -> tuple[Problem, Any]:
        """The problem and the dataset in the problem's coordinates."""

    def population(self, cfg: Any, ds: Any, rng: np.random.Generator, ws: Any) -> Any:
        """The population metrics of this data, or None when there are none."""

    def prepare(self, cfg: Any, engine: str, user_data: bool, ws: Any) -> float:
        """Once-per-process work before the setup; seconds (counted as start-up)."""

    def memory_estimate(self, cfg: Any, engine: str, save_scores: bool = False) -> list:
        """(keys, what, bytes) of the large arrays a run allocates."""

    def step_flops(self, cfg: Any, engine: str) -> float:
        """Flops of one GD step (sweeps balance their workers by it)."""

    def setup_key(self, cfg: Any) -> tuple:
        """What a run's setup depends on (sweeps group points that share one)."""

    def limit_watch(self, problem: Problem) -> Any:
        """The observer of the max-margin limit (config limit = true)."""

    def population_note(self, ds: Any, problem: Problem) -> str:
        """What result.json's data section says of the population metrics."""

    def check_grad(self, cfg: Any, seed: int, h: float) -> tuple[str, dict[str, dict], int]:
        """Heading, per-loss finite-difference errors (:func:`finite_difference_errors`), name width."""


def finite_difference_errors(
    loss_fn: Callable[..., float],
    grad_fn: Callable[..., Iterable[Array]],
    params: dict[str, Array],
    h: float = 1e-6,
) -> dict[str, dict]:
    """Central differences of ``loss_fn(*params)`` against ``grad_fn(*params)``.

    ``params`` maps block names (e.g. "W", "p", "nu") to arrays in call order.
    Returns per block the max and mean absolute error and the max error
    relative to ||analytic||_inf.
    """
    names = list(params)
    values = [np.array(v, dtype=np.float64) for v in params.values()]
    analytic = grad_fn(*values)
    out = {}
    for b, name in enumerate(names):
        fd = np.empty_like(values[b])
        flat, fd_flat = values[b].reshape(-1), fd.reshape(-1)
        for j in range(flat.size):
            old = flat[j]
            flat[j] = old + h
            up = loss_fn(*values)
            flat[j] = old - h
            down = loss_fn(*values)
            flat[j] = old
            fd_flat[j] = (up - down) / (2 * h)
        err = np.abs(fd - analytic[b])
        scale = np.abs(analytic[b]).max()
        out[name] = {
            "max_abs": float(err.max()),
            "mean_abs": float(err.mean()),
            "rel": float(err.max() / scale) if scale > 0 else float(err.max()),
        }
    return out
