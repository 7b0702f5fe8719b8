"""What every model supplies, and what the rest of attnsim may assume of it.

Adding a model
--------------
1. A folder ``attnsim/models/<name>/`` with an empty ``__init__.py``, ``keys.py`` and
   ``spec.py``. ``keys.py``: ``KEYS``, a frozen dataclass of the config keys only this
   model reads (their defaults, and ``field(metadata=...)`` with ``allowed`` and ``help``
   for ``attnsim keys``), or of no field, and ``check(cfg)`` for their rules; it imports
   nothing of attnsim but :mod:`attnsim._meta` (the config loads it with every command).
   ``spec.py``: ``SPEC``, an instance of a :class:`ModelSpec` subclass; the registry
   imports it when the model first runs.
2. One line in :data:`attnsim.registry.MODELS`, an :class:`attnsim.registry.Entry`: the
   package; the defaults of common keys it changes; what it can run (engines,
   integrators, optimizers, attention normalizations, precision twins, data models and
   sources: config validation refuses anything else, for every model, in one line); its
   parameter blocks (the optimizers' needs are checked against them); the data-file
   arrays it owns; the metrics it records beside the common ones (they reach
   result.json's ``final``, records.csv, ``load_sweep`` and ``attnsim plot``). Its keys
   may not take a name another model, an optimizer or the common config has (the
   registry refuses the collision, naming both owners). :class:`attnsim.config.Config`
   is assembled from the common keys and every registered model's and optimizer's.
3. The spec: :meth:`ModelSpec.plan` (the engine and why), :meth:`ModelSpec.build` (a
   :class:`Problem` from a dataset), :meth:`ModelSpec.check_grad` (its reference against
   central differences) are required, and ``name`` and ``warm_configs``; every other
   method has a default here (:meth:`ModelSpec.gradient_cases` names the small runs
   whose steppers check-grad checks).
4. The problem hands the driver a :class:`Stepper` (``stepper``) and an evaluator
   (``evaluator``: population metrics, a test set, or None; its ``defer`` may return a
   :class:`Done` job), and gives ``objective``: the reference loss GD descends, in the
   problem's coordinates (check-grad differentiates it against the gradient the stepper
   applies, :mod:`attnsim.models.gradcheck`).
5. The stepper subclasses :class:`Stepper` and writes three methods: ``_advance``
   (the steps), ``observe`` and ``state``. The base class keeps the records the paper's
   recorder reads (``fit_since``, ``S_acc``), checks what ``_advance`` reports
   (:class:`Outcome`), snapshots and restores, copies the final state. A model that takes
   plug-in optimizers (``optimizers=registry.ANY``) hands each step's gradients to
   ``registry.make_optimizer(cfg).update`` (:mod:`attnsim.optimizers.base`); the model's
   own metrics come from ``extra_metrics`` or the evaluator.
6. ``tests/test_models.py`` runs its conformance suite over every registered model: the
   model is tested the moment its registry line exists (its capabilities probed, every
   undeclared one refused; the gradients its steppers apply checked in every engine).

Nothing outside ``attnsim/models/`` and the registry branches on a model's or an
engine's name (``tests/test_layout.py``).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from .._meta import GRAD_TOL, ConfigError  # noqa: F401  (GRAD_TOL: check-grad's, part of the interface)
from ..runtime.resources import check_fits
from ..runtime.threads import Done  # noqa: F401  (part of the interface: a job already done)

if TYPE_CHECKING:  # names in annotations only
    from ..config import Config
    from ..data.dataset import Dataset, Streams
    from ..runtime.workspace import Workspace

Array = np.ndarray


class Outcome(enum.IntEnum):
    """How a stepper's advance ended, and what a run says about it (kernels return
    these codes as plain integers)."""

    FINISHED = 0  # every requested step was taken
    DIVERGED = 1  # the loss or a parameter norm is not finite
    FROZEN = 2  # every gradient underflows to 0: later steps keep the state
    STALLED = 3  # an integrator could not make progress (the flow's step-size control)

    def message(
        self, step: float, lr: float | None = None, normalized: bool = False, detail: str = ""
    ) -> str:
        """The run's words for this outcome at ``step`` (``detail``: the stepper's own account)."""
        if self is Outcome.FINISHED:
            return f"finished at step {step:g}"
        if self is Outcome.FROZEN:
            head = f"frozen after step {step:g}: every gradient underflows to 0"
            if normalized:  # a smaller lr only delays it: the scores themselves are one-hot
                return f"{head} (every score but the top one below exp(-745)); later steps keep that state"
            return f"{head} (reduce lr)"
        if detail:
            return detail
        if self is Outcome.DIVERGED:
            lr_hint = "" if lr is None else f" (reduce lr={lr:g})"
            return f"diverged at step {step:g}: the training loss or a parameter norm is not finite{lr_hint}"
        return f"stalled at step {step:g}"


# Outcome's codes as plain integers: what Numba kernels return (int(Outcome(...)))
OK, DIVERGED, FROZEN = int(Outcome.FINISHED), int(Outcome.DIVERGED), int(Outcome.FROZEN)


class Observation(NamedTuple):
    """A state seen on the training set: (n, T) logits, values (None when the model
    has no per-token values) and scores, (n,) outputs, the mean loss."""

    z: np.ndarray
    u: np.ndarray | None
    s: np.ndarray
    f: np.ndarray
    loss: float


class Stepper(ABC):
    """A model's training dynamics as the driver steps them.

    Subclasses write :meth:`_advance`, :meth:`observe` and :meth:`state`, and call
    :meth:`_init_records` in their constructor (or provide ``fit_since`` and ``S_acc``
    themselves). The records the paper's recorder reads: ``fit_since`` (n,: the first
    step of each sample's current run of fitted states, -1 while unfitted) and
    ``S_acc`` (n,: the cumulative s_rel (1 - s_rel), in units of steps).

    ``whole_spans``: the stepper integrates each span between log points whole (a
    flow; the driver never cuts it for a progress bar) and reports its progress
    through ``progress`` (set by the driver, called with the step reached).
    ``detail``: the stepper's account of a DIVERGED or STALLED outcome.
    """

    whole_spans: bool = False
    progress: Callable[[float], None] | None = None
    detail: str = ""
    fit_since: np.ndarray
    S_acc: np.ndarray
    rel: np.ndarray | None = None

    def _init_records(self, n: int, rel: np.ndarray | None = None, T: int | None = None) -> None:
        """Fresh in-loop records for ``n`` samples; ``rel`` (n*T or (n, T)): the relevant-token indicator."""
        self.fit_since = -np.ones(n, dtype=np.int64)
        self.S_acc = np.zeros(n)
        if rel is not None:
            self.rel = np.asarray(rel, dtype=np.float64).reshape(n, -1 if T is None else T)

    def advance(self, step0: float, nsteps: float) -> tuple[Outcome, float]:
        """Move from state ``step0`` by ``nsteps`` steps: (outcome, step reached)."""
        status, reached = self._advance(step0, nsteps)
        return Outcome(int(status)), reached

    @abstractmethod
    def _advance(self, step0: float, nsteps: float) -> tuple[int, float]:
        """The steps themselves: (an :class:`Outcome` or its code, step reached)."""

    @abstractmethod
    def observe(self) -> Observation:
        """The current state on the training set."""

    @abstractmethod
    def state(self) -> Mapping[str, np.ndarray]:
        """The current parameters (engine coordinates; may be the stepper's own arrays)."""

    def final_state(self) -> Mapping[str, np.ndarray]:
        """The current parameters as arrays that later steps do not change."""
        return {k: np.array(v, copy=True) for k, v in self.state().items()}

    def extra_metrics(self) -> dict[str, float]:
        """Model-specific scalars logged at every log point (norms, ...)."""
        return {}

    def relevant_increments(self, s: np.ndarray) -> np.ndarray:
        """(n,) s_rel (1 - s_rel) of scores ``s`` (n, T), s_rel the score on the relevant tokens."""
        sr = (s * self.rel).sum(axis=1)
        return sr * (1.0 - sr)

    def snapshot(self) -> Any:
        """A copy of the current state and records, for :meth:`restore`."""
        return dict(self.final_state()), self.fit_since.copy(), self.S_acc.copy(), self._snapshot_extra()

    def restore(self, snap: Any) -> None:
        """Go back to a state saved by :meth:`snapshot`."""
        arrays, fit, S, extra = snap
        self._restore_arrays(arrays)
        self.fit_since[...] = fit
        self.S_acc[...] = S
        self._restore_extra(extra)

    def _restore_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Write a snapshot's parameters back (into the arrays :meth:`state` returns)."""
        live = self.state()
        for k, v in arrays.items():
            live[k][...] = v

    def _snapshot_extra(self) -> Any:
        """What else a snapshot keeps (an optimizer's moments, ...)."""
        return None

    def _restore_extra(self, extra: Any) -> None:
        """The other half of :meth:`_snapshot_extra`."""
        return None  # by default: nothing


class Job(Protocol):
    """A computation under way: ``result()`` waits for its value, ``cancel()`` drops it if
    it has not started. :class:`Done` is a job that is already done (an evaluator whose
    metrics are computed at once returns one from ``defer``)."""

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

    def stepper(self, cfg: Config, rel: np.ndarray, y: np.ndarray | None = None) -> Stepper: ...

    def evaluator(self, cfg: Config, pop: Any) -> Evaluator | None: ...

    def objective(self, cfg: Config, state: Mapping[str, np.ndarray], y: np.ndarray) -> float:
        """The objective plain GD descends at ``state`` (a stepper's state, in this problem's
        coordinates) with labels ``y``, by the model's NumPy reference, penalties included:
        what check-grad differentiates (:mod:`attnsim.models.gradcheck`)."""
        ...


class Own(NamedTuple):
    """A run of a model with metrics of its own (``classifier = False``): its trajectory
    (:class:`attnsim.driver.Trajectory`), result.json's ``final``, what its data section says
    (``notes``: the population method, the test set, ...) and arrays saved beside the trajectory."""

    traj: Any
    final: dict
    notes: dict
    arrays: dict


class GradCheck(NamedTuple):
    """What ``attnsim check-grad`` prints: the heading lines, and per loss and
    parameter block the errors of :func:`finite_difference_errors`."""

    heading: list[str]
    errors: dict[str, dict[str, dict[str, float]]]


class ModelSpec(ABC):
    """A model as the rest of attnsim sees it (one instance per model: ``SPEC``).

    Required: :meth:`plan`, :meth:`build`, :meth:`check_grad`, ``name`` and
    ``warm_configs`` (the tiny run per integrator that warms every kernel up). The
    planning methods take the config alone (a sweep's parent plans every point
    without the model's kernels); the rest run the model.
    """

    name: str
    warm_configs: dict[str, dict]
    # a classifier of the paper's kind (labels, scores, regimes: the paper's recorder, metrics and
    # theory); a model that is not one writes :meth:`train_own` and records metrics of its own
    classifier: bool = True
    # a model that is not one: its run's plot, (title, metric names, log y) per panel (three panels)
    plot_groups: tuple = ()

    @abstractmethod
    def plan(self, cfg: Config, user_data: bool) -> tuple[str, str]:
        """The engine to use and why (ConfigError when none can run this config)."""

    @abstractmethod
    def build(
        self, cfg: Config, ds: Dataset | None, streams: Streams, engine: str, reason: str, ws: Workspace
    ) -> tuple[Problem, Dataset]:
        """The problem and the dataset in the problem's coordinates."""

    @abstractmethod
    def check_grad(self, cfg: Config, seed: int, h: float) -> GradCheck:
        """The model's reference gradients against central differences (``attnsim check-grad``)."""

    def recorder(self, grid: np.ndarray) -> Any:
        """A model that is not a classifier (``classifier = False``): the recorder of its metrics
        along the log grid (:class:`attnsim.driver.Recorder`), which the driver hands every log
        point (:func:`attnsim.training.train_own`)."""
        raise NotImplementedError(f"model={self.name} is a classifier: attnsim.observers records it")

    def findings(self, problem: Problem, traj: Any, cfg: Config, pop: Any) -> Own:
        """A model that is not a classifier: its run's final metrics (the names its registry entry
        declares), what its data section says and the arrays saved beside the trajectory."""
        raise NotImplementedError(f"model={self.name} is a classifier: attnsim.metrics measures it")

    def summary(self, res: Any) -> list[str]:
        """The lines ``attnsim run`` prints of a run of a model that is not a classifier."""
        raise NotImplementedError(f"model={self.name} is a classifier: attnsim.report summarizes it")

    def seeds_summary(self, runs: list) -> list[str]:
        """The lines ``attnsim run --seeds`` prints after its heading (a model that is not a classifier)."""
        raise NotImplementedError(
            f"model={self.name} is a classifier: attnsim.experiments.seeds summarizes it"
        )

    def validate(self, cfg: Config, user_data: bool) -> None:
        """ConfigError for a combination of keys this model cannot run with."""
        return None  # by default: nothing

    def gradient_cases(self, engine: str) -> list[tuple[str, dict]]:
        """(label, config keys) of the small runs whose steppers check-grad checks in ``engine``
        (:mod:`attnsim.models.gradcheck`): every kernel and form a GD step can take there."""
        return [("gd", dict(self.warm_configs["gd"]))]

    def trained_blocks(self, cfg: Config, state: Mapping[str, np.ndarray]) -> tuple[str, ...]:
        """The blocks of a stepper's state that GD moves under ``cfg`` (default: every one)."""
        return tuple(state)

    def memory_estimate(self, cfg: Config, engine: str, save_scores: bool = False) -> list:
        """(keys, what, bytes) of the large arrays a run allocates."""
        return []

    def step_flops(self, cfg: Config, engine: str) -> float:
        """Flops of one GD step (sweeps balance their workers by it; the time check uses it)."""
        return 0.0

    def setup_flops(self, cfg: Config, engine: str) -> float:
        """Flops of a run's setup before its steps (sweeps balance their workers by it)."""
        return 0.0

    def run_flops(self, cfg: Config, engine: str) -> float:
        """Flops of a run after its setup, for ordering work (sweeps start the costliest
        first): its steps, and its clean-label twin's (the same steps again)."""
        return cfg.steps * self.step_flops(cfg, engine) * (2.0 if cfg.clean_twin and cfg.noise_rate else 1.0)

    def check_resources(self, cfg: Config, engine: str, save_scores: bool = False) -> None:
        """ConfigError when the run would not fit in memory or time."""
        flops = self.step_flops(cfg, engine) if cfg.integrator == "gd" else 0.0
        check_fits(self.memory_estimate(cfg, engine, save_scores), cfg.steps, flops, ConfigError)

    def setup_key(self, cfg: Config) -> tuple:
        """What a run's setup depends on (sweeps group points that share one)."""
        return (cfg.seed, cfg.n, cfg.T, cfg.d)

    def setup_threads(self, cfg: Config, engine: str) -> int | None:
        """BLAS threads for the setup (None: all of them)."""
        return 1

    def check_data(self, cfg: Config, ds: Dataset) -> None:
        """DataError for arrays of a data file this model cannot use; warnings into ``ds.warnings``."""
        return None  # by default: nothing

    def warm_up(self) -> None:
        """Load (or compile) the model's kernels and tables."""
        return None  # by default: nothing

    def prepare(self, cfg: Config, engine: str, user_data: bool, ws: Workspace) -> float:
        """Once-per-process work before the setup; seconds (counted as start-up)."""
        return 0.0

    def population(self, cfg: Config, ds: Dataset, rng: np.random.Generator, ws: Workspace) -> Any:
        """The population metrics of this data (a classifier's: an object whose ``evaluate`` takes
        the seven scalars of :meth:`attnsim.models.attention.population.Population.evaluate`; a
        model with metrics of its own: what its evaluator reads), or None."""
        return None

    def population_note(self, ds: Dataset, problem: Problem) -> str:
        """What result.json's data section says of the population metrics."""
        return f"none for model={self.name}: no closed form; test metrics come from a finite test set"

    def limit_watch(self, problem: Problem) -> Any:
        """The observer of the max-margin limit (config limit = true)."""
        raise ConfigError(f"limit: the max-margin limit is not defined for model={self.name}")

    def precision_twin(self, problem: Problem, cfg: Config, rel: np.ndarray, y: np.ndarray) -> Any:
        """The run's precision twin (SPEC §16), or None: a :class:`Stepper` of the same
        problem in a lower precision, whose ``watch_run(state)`` is shown the run's state
        at every log point (to log how far the twin has moved from it), whose ``problem``
        measures its states (None: the run's), whose ``fmt``, ``unit_roundoff`` and
        ``first_saturated`` name its format and its first saturated step, and whose
        ``q_rel_dev()`` (None where a model has no q = W p) and ``nan_note()`` ("" or why the
        format itself made a gradient NaN) the run's record reads."""
        return None


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
