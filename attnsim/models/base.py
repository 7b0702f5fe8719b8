"""What every model supplies, and what the rest of attnsim may assume of it.

Adding a model
--------------
1. A folder ``attnsim/models/<name>/`` with an empty ``__init__.py``, ``keys.py`` and
   ``spec.py``. ``keys.py``: ``KEYS``, a frozen dataclass of the config keys only this
   model reads (their defaults, and ``field(metadata=...)`` with ``allowed`` and ``help``
   for ``attnsim keys`` and ``probe``, a second allowed value, or the keys to run it with,
   at which the conformance suite checks that the key moves the run), or of no field, and
   ``check(cfg)`` for their rules; it imports nothing of attnsim but :mod:`attnsim._meta`
   (the config loads it with every command). ``spec.py``: ``SPEC``, an instance of a
   :class:`ModelSpec` subclass; the registry imports it when the model first runs.
2. One line in :data:`attnsim.registry.MODELS`, an :class:`attnsim.registry.Entry`: the
   package; the common keys it reads (``reads``, and ``reads_with`` per integrator: every
   other common key set away from its default is refused in one line naming the key and the
   model); the defaults of common keys it changes; what it can run (engines, integrators,
   optimizers, attention normalizations, precision twins, data models and sources: config
   validation refuses anything else, for every model, in one line); its parameter blocks
   (the optimizers' needs are checked against them); the data-file arrays it owns; the
   metrics it records beside the common ones (they reach result.json's ``final``,
   records.csv, ``load_sweep`` and ``attnsim plot``). No name may collide: its keys with
   another model's, an optimizer's or the common config's, its metrics with a config key,
   another model's metric of another meaning or a classifier run's name
   (:mod:`attnsim.metric_names`); :class:`attnsim.config.Config` is assembled from the
   common keys and every registered model's and optimizer's, and refuses a collision.
3. The spec: :meth:`ModelSpec.plan` (the engine and why), :meth:`ModelSpec.build` (a
   :class:`Problem` from a dataset), :meth:`ModelSpec.check_grad` (its reference against
   central differences) are required, and ``name``, ``warm_configs`` (a tiny run per
   integrator) and ``integrators`` (the integrators its problem builds a stepper for: an
   integrator the registry line declares without one is refused when the spec loads);
   every other method has a default here (:meth:`ModelSpec.gradient_cases` names the small
   runs whose steppers check-grad checks).
4. The problem hands the driver a :class:`Stepper` (``stepper``) and an evaluator
   (``evaluator``: population metrics, a test set, or None; its ``defer`` may return a
   :class:`Done` job), and gives ``objective``: the reference loss GD descends, in the
   problem's coordinates (check-grad differentiates it against the gradient the stepper
   applies, :mod:`attnsim.models.gradcheck`).
5. A classifier of the paper's kind: its stepper subclasses :class:`ClassifierStepper`
   and writes three methods, ``_advance`` (the steps), ``observe`` and ``state``; the base
   class keeps the records the paper's recorder reads (``fit_since``, ``S_acc``), checks
   what ``_advance`` reports (:class:`Outcome`), snapshots and restores, copies the final
   state. Any other model (``classifier = False``: a regression, no labels or scores): its
   stepper subclasses :class:`Stepper` (``_advance``, ``state`` and ``extra_metrics``),
   and the library gives it the rest (:mod:`attnsim.models.own`: its data stand-in
   ``OwnData``, the recorder of its metrics, and here the default ``findings``,
   ``summary`` and ``seeds_summary``). A model that takes plug-in optimizers
   (``optimizers=registry.ANY``) hands each step's gradients to
   ``registry.make_optimizer(cfg).update`` (:mod:`attnsim.optimizers.base`).
6. ``tests/test_models.py`` runs its conformance suite over every registered model: the
   model is tested the moment its registry line exists. What it declares is honoured
   (each declared integrator, optimizer, attention, precision twin and data model changes
   the warm run; each declared engine runs; each own key moves the run at its probe),
   what it does not declare is refused (capabilities, and every common key it does not
   read), what it reports is checked (every declared metric finite after the warm run,
   every array it writes declared), and the gradients its steppers apply match central
   differences in every engine. Each class of fault has a mutation test on the toy model.

Nothing outside ``attnsim/models/`` and the registry branches on a model's or an
engine's name (``tests/test_layout.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from .. import registry
from .._meta import GRAD_TOL, ConfigError  # noqa: F401  (GRAD_TOL: check-grad's, part of the interface)
from ..runtime.resources import check_fits
from ..runtime.threads import Done  # noqa: F401  (part of the interface: a job already done)
from .own import MetricsRecorder, last_finite, spread, with_se
from .stepper import (  # noqa: F401  (part of this module's interface)
    DIVERGED,
    FROZEN,
    OK,
    ClassifierStepper,
    Observation,
    Outcome,
    Stepper,
)

if TYPE_CHECKING:  # names in annotations only
    from ..config import Config
    from ..data.dataset import Dataset, Streams
    from ..runtime.workspace import Workspace

Array = np.ndarray


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


class TheoryError(ValueError):
    """Keys or options a model's theory cannot take (the message names the key): exit 2."""


class Theory(NamedTuple):
    """What ``attnsim theory MODEL`` prints: its lines, the JSON object of ``--json``, whether
    the solver converged (exit 1 when not) and, when not, why."""

    lines: list[str]
    data: dict
    ok: bool = True
    message: str = ""


class GradCheck(NamedTuple):
    """What ``attnsim check-grad`` prints: the heading lines, and per loss and
    parameter block the errors of :func:`finite_difference_errors`."""

    heading: list[str]
    errors: dict[str, dict[str, dict[str, float]]]


class ModelSpec(ABC):
    """A model as the rest of attnsim sees it (one instance per model: ``SPEC``).

    Required: :meth:`plan`, :meth:`build`, :meth:`check_grad`, ``name``, ``warm_configs``
    and ``integrators``. The planning methods take the config alone (a sweep's parent plans
    every point without the model's kernels); the rest run the model.

    Attributes
    ----------
    name : str
        The model's name, as in :data:`attnsim.registry.MODELS` and the ``model`` key.
    warm_configs : dict of str to dict
        Per integrator the tiny run that loads (or compiles) every kernel it needs: config
        keys, the model's included. The conformance suite runs each one.
    integrators : tuple of str
        The integrators its problem builds a stepper for (those its registry line declares
        must be here: checked when the spec loads, :func:`attnsim.registry.spec`).
    classifier : bool
        A classifier of the paper's kind (labels, scores, regimes: the paper's recorder,
        metrics and theory). A model that is not one records metrics of its own
        (:mod:`attnsim.models.own`; :meth:`recorder`, :meth:`findings`, :meth:`summary`).
    plot_groups : tuple
        A model that is not a classifier: its run's plot, (title, metric names, log y) per
        panel (three panels).

    Examples
    --------
    The smallest regression model's spec (its problem and stepper elsewhere)::

        class QuadraticSpec(ModelSpec):
            name = "quadratic"
            classifier = False
            integrators = ("gd",)
            warm_configs = {"gd": {"model": "quadratic", "d": 4, "steps": 2}}

            def plan(self, cfg, user_data):
                return "dense", "the quadratic runs in d dimensions"

            def build(self, cfg, ds, streams, engine, reason, ws):
                return QuadraticProblem(cfg, streams.init), OwnData("a random quadratic")

            def check_grad(self, cfg, seed, h):
                ...  # finite_difference_errors on its reference loss and gradient
    """

    name: str
    warm_configs: dict[str, dict]
    integrators: tuple[str, ...] = ("gd",)
    classifier: bool = True
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
        point (:func:`attnsim.training.train_own`); by default the library's
        :class:`attnsim.models.own.MetricsRecorder` (the stepper's ``extra_metrics`` and the
        evaluator's metrics at each log point)."""
        if self.classifier:
            raise NotImplementedError(f"model={self.name} is a classifier: attnsim.observers records it")
        return MetricsRecorder(grid)

    def findings(self, problem: Problem, traj: Any, cfg: Config, pop: Any) -> Own:
        """A model that is not a classifier: its run's final metrics (the names its registry entry
        declares), what its data section says and the arrays saved beside the trajectory. By
        default each declared metric's last finite value on the log grid, the population
        metrics' method (``pop.method``) as the data section's note, no extra arrays."""
        if self.classifier:
            raise NotImplementedError(f"model={self.name} is a classifier: attnsim.metrics measures it")
        final = last_finite(traj.arrays, registry.MODELS[self.name].metrics)
        return Own(traj, final, {"population": getattr(pop, "method", None)}, {})

    def summary(self, res: Any) -> list[str]:
        """The lines ``attnsim run`` prints of a run of a model that is not a classifier; by
        default every declared metric, with its standard error where it declares one (``<name>_se``)."""
        if self.classifier:
            raise NotImplementedError(f"model={self.name} is a classifier: attnsim.report summarizes it")
        declared = registry.MODELS[self.name].metrics
        f = res.final
        shown = [k for k in declared if not (k.endswith("_se") and k[:-3] in declared)]
        return [f"{k}: {with_se(f.get(k), f.get(f'{k}_se'))}  ({declared[k]})" for k in shown]

    def seeds_summary(self, runs: list) -> list[str]:
        """The lines ``attnsim run --seeds`` prints after its heading (a model that is not a
        classifier); by default every declared metric's mean +- sd over the seeds."""
        if self.classifier:
            raise NotImplementedError(
                f"model={self.name} is a classifier: attnsim.experiments.seeds summarizes it"
            )
        declared = registry.MODELS[self.name].metrics
        names = [k for k in declared if not k.endswith("_se")]
        return [f"  {k} {spread([r.final.get(k) for r in runs])}" for k in names]

    def theory(self, values: dict, options: dict, progress: Callable[[str], None]) -> Theory:
        """The model's theory at the keys ``values`` (``--set``) with the solver's ``options``
        (``--branch``, ``--rule``, ``--int-tol`` as given), for a model whose registry line says
        ``theory=True``; ``progress`` takes a line for stderr. TheoryError for keys it cannot take."""
        raise TheoryError(f"{self.name}: model={self.name} has no theory to solve")

    def validate(self, cfg: Config, user_data: bool) -> None:
        """ConfigError for a combination of keys this model cannot run with."""
        return None  # by default: nothing

    def gradient_cases(self, engine: str) -> list[tuple[str, dict]]:
        """(label, config keys) of the small runs whose steppers check-grad checks in ``engine``
        (:mod:`attnsim.models.gradcheck`): every kernel and form a GD step can take there."""
        return [("gd", dict(self.warm_configs["gd"]))]

    def applied_gradient(self, block: str, before: np.ndarray, after: np.ndarray, lr: float) -> np.ndarray:
        """The gradient a GD step applied to ``block``, read back from the states before and after
        it (check-grad on the steppers): (before - after) / lr for plain GD; a model whose step is
        projected (on a sphere, say) reads its own back (and gives :meth:`tangent`)."""
        return (before - after) / lr

    def tangent(self, block: str, theta: np.ndarray, g: np.ndarray) -> np.ndarray:
        """The part of a gradient ``g`` at ``theta`` that a step of this model can apply (check-grad
        compares it with :meth:`applied_gradient`): all of it for plain GD; its tangent part on a sphere."""
        return g

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
    project: Callable[[str, Array], Array] | None = None,
) -> dict[str, dict]:
    """Central differences of ``loss_fn(*params)`` against ``grad_fn(*params)``.

    ``params`` maps block names (e.g. "W", "p", "nu") to arrays in call order; ``project(name,
    fd)``, if given, maps each block's central differences to the part the analytic gradient
    stands for (a step on a sphere applies the tangent part only). Returns per block the max and
    mean absolute error and the max error relative to ||analytic||_inf.
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
        if project is not None:
            fd = project(name, fd)
        err = np.abs(fd - analytic[b])
        scale = np.abs(analytic[b]).max()
        out[name] = {
            "max_abs": float(err.max()),
            "mean_abs": float(err.mean()),
            "rel": float(err.max() / scale) if scale > 0 else float(err.max()),
        }
    return out
