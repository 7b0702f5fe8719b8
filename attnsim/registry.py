"""The models and optimizers attnsim runs: one line each (adding a model is a folder under
``attnsim/models/`` and a line here, docs/design.md gives the steps; adding an optimizer is a
file under ``attnsim/optimizers/`` and a line here, :mod:`attnsim.optimizers.base`).

Each model's entry states, as plain data, what the layers below the models need to know of
it without importing it: the module of the config keys only it uses (a frozen dataclass with
their defaults and help, refused for the other models, and their rules), the defaults of the
common keys it changes, what it can run (its *capabilities*: engines, integrators, optimizers,
attention normalizations, precision twins, data models and data sources; config validation
refuses anything else in one line, for every model, before any work), the arrays a data file
may hold for it and the keys those arrays decide, and the metrics it records beside the common
ones (they reach result.json's ``final``, records.csv, ``load_sweep`` and ``attnsim plot``).
The key modules import nothing of attnsim but ``_meta``; they are loaded here, as the plug-in
point, when :class:`attnsim.config.Config` is assembled. The model's code loads on first use
of :func:`spec`.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from dataclasses import dataclass, field
from typing import Any

from . import metric_names

ANY = "any"  # a model's optimizers: every registered one whose needs it meets

# -- the common keys a model may read, in groups for its registry line (SPEC §8) --
# always read, never declared: the model, the preset's label, and the keys its capabilities
# decide (engine, integrator, optimizer, attention, precision_twin, data_model; weight_decay
# follows the optimizer: Entry.weight_decay_with)
FRAMEWORK = ("model", "preset", "engine", "integrator", "optimizer", "weight_decay", "attention",
             "precision_twin", "data_model", "init")  # fmt: skip
SCHEDULE = ("lr", "steps", "seed", "log_scale", "log_every", "log_points")  # the driver's
PAPER_DATA = (
    "n",
    "T",
    "d",
    "signal_norm",
    "sigma",
    "rho",
    "n_relevant",
    "n_weak_aligned",
    "n_weak_opposite",
    "shuffle_roles",
    "noise_rate",
    "label_noise",
)  # fmt: skip  (Sakamoto & Sato's data, SPEC §2)
VERDICTS = ("test_n", "benign_error", "gen_score", "clean_twin", "refine_times")  # a classifier's
POPULATION = ("pop_points", "pop_seed", "pop_log_points")  # population metrics (estimated with a seed)
FLOW = ("flow_method", "flow_rtol", "flow_atol")  # SciPy's Runge-Kutta solvers
# a key read under a condition on other keys, for every model: (the condition, its words)
CONDITIONS = {
    "log_every": (lambda c: c.log_scale == "linear", "log_scale=linear (it spaces a linear log grid)"),
    "log_points": (lambda c: c.log_scale == "log", "log_scale=log (it counts a geometric log grid)"),
}


@dataclass(frozen=True)
class Entry:
    """One model's registry line: what the layers below the models know of it, as plain data.

    Parameters
    ----------
    module : str
        The model's package: ``<module>.spec.SPEC`` its ModelSpec, ``<module>.keys`` its keys.
    defaults : dict
        The common keys whose default it changes (``n``, ``lr``, ...).
    arrays, decided
        The data-file arrays it owns, and the keys their sizes decide (key -> (array, axis)).
    engines, coordinate_engines, integrators, optimizers, blocks, weight_decay_with,
    attentions, precision_twins, data_models, data_sources, inits
        What it can run: anything else is refused by config validation in one line, before
        any work; the conformance suite runs each declared value and sees it change the run.
    metrics : dict of str to str
        What it records beside the common metrics, name -> meaning. A name may not be a config
        key, another model's metric of another meaning, or a name a classifier run writes
        unless it declares that name's meaning word for word (:mod:`attnsim.metric_names`).
    reads, reads_with
        The common keys it reads (beside :data:`FRAMEWORK`), under every integrator and per
        integrator; any other set away from its default is refused, naming the key and the model.
    hints : dict of str to str
        Why a common key it does not read cannot apply: the refusal's words.
    theory : bool
        Its spec answers ``attnsim theory MODEL`` (:meth:`attnsim.models.base.ModelSpec.theory`).
    renamed : dict of str to str
        A metric's earlier name -> its name: result files written before the rename load with it.

    Examples
    --------
    A regression that draws its own data and trains one block by any optimizer::

        Entry("mypkg.quadratic", defaults={"n": 0}, optimizers=ANY, blocks=("w",),
              metrics={"risk": "the population risk", "risk_se": "its standard error"},
              reads=("d", "sigma") + SCHEDULE)
    """

    module: str  # the model's package: <module>.spec.SPEC its ModelSpec, <module>.keys its config keys
    defaults: dict[str, Any] = field(default_factory=dict)  # common keys' defaults under this model
    arrays: tuple[str, ...] = ()  # data-file arrays of this model (its parameters)
    decided: dict[str, tuple[str, int]] = field(default_factory=dict)  # key -> (array, axis of its size)
    # -- what it can run (anything else is refused by config validation, exit 2) --
    engines: tuple[str, ...] = ("dense",)  # the coordinates it can run in (config engine = one, or auto)
    coordinate_engines: tuple[str, ...] = ("dense",)  # engines in the data's own coordinates
    integrators: tuple[str, ...] = ("gd",)
    optimizers: tuple[str, ...] | str = ("gd",)  # or ANY: every optimizer whose needs it meets
    blocks: tuple[str, ...] = ()  # its parameter blocks (what an optimizer's needs are checked against)
    weight_decay_with: tuple[str, ...] = ("adam",)  # the optimizers that apply weight_decay for it
    attentions: tuple[str, ...] = ("softmax",)  # the scores' normalizations
    precision_twins: tuple[str, ...] = ("none",)
    data_models: tuple[str, ...] = ("sakamoto2025",)  # the generated data it reads
    data_sources: tuple[str, ...] = ("generated",)  # "generated", "file" (an .npz), "real" (attnsim real)
    inits: tuple[str, ...] = ()  # its initialization schemes (the init key; the first is its default)
    # -- what it records beside the common metrics: name -> meaning (a classifier metric's name
    # only with its meaning, attnsim.metric_names.SHARED; no config key's name) --
    metrics: dict[str, str] = field(default_factory=dict)
    # -- the common keys it reads (beside FRAMEWORK): any other set away from its default is
    # refused, one line naming the key and the model, before any work --
    reads: tuple[str, ...] = ()  # under every integrator it runs
    reads_with: dict[str, tuple[str, ...]] = field(default_factory=dict)  # integrator -> read only there
    hints: dict[str, str] = field(default_factory=dict)  # key -> why it cannot apply (the refusal's words)
    theory: bool = False  # its spec answers ``attnsim theory`` (ModelSpec.theory)
    renamed: dict[str, str] = field(default_factory=dict)  # a metric's earlier name -> its name (older files)


ENCODER_ARRAYS = (
    "cls",
    "ln1_g",
    "ln1_b",
    "W_qkv",
    "ln2_g",
    "ln2_b",
    "W1",
    "b1",
    "W2",
    "b2",
    "lnf_g",
    "lnf_b",
    "head_w",
    "head_b",
)  # fmt: skip  (the encoder's parameters, in PyTorch's names; SPEC §12)

MODELS: dict[str, Entry] = {
    "attention": Entry(
        "attnsim.models.attention",
        engines=("dense", "reduced", "implicit"),
        integrators=("gd", "flow", "population", "population_flow", "online"),
        optimizers=ANY,
        blocks=("W", "p", "nu"),
        attentions=("softmax", "stablemax"),
        precision_twins=("none", "float32", "bfloat16", "float64"),
        data_models=("sakamoto2025", "magen2025"),
        data_sources=("generated", "file", "real"),
        reads=PAPER_DATA + SCHEDULE + VERDICTS + POPULATION
        + ("train", "init_W", "init_W_scale", "init_p", "init_p_scale", "init_nu", "loss"),
        reads_with={
            "flow": FLOW, "population_flow": FLOW + ("batch",), "population": ("batch",), "online": ("batch",)
        },
    ),
    "encoder": Entry(
        "attnsim.models.encoder",
        # the clean-label twin doubles the step loop: cheap for the attention model (its
        # setup is shared), a second full run for the encoder
        defaults={"test_n": 1000, "clean_twin": False},
        arrays=ENCODER_ARRAYS,
        decided={"mlp_dim": ("W1", 0)},
        optimizers=ANY,
        blocks=ENCODER_ARRAYS,
        precision_twins=("none", "float32", "bfloat16", "float64"),
        data_sources=("generated", "file", "real"),
        # no population metrics (its test metrics come from test_n fresh samples); its own init
        reads=PAPER_DATA + SCHEDULE + VERDICTS + ("pop_log_points", "loss"),
        hints={
            "train": "the encoder trains every parameter",
            "init_nu": "the encoder has its own head, drawn with init_cls_scale",
            "pop_points": "the encoder has no population metrics: its test metrics come from test_n samples",
            **{k: "the encoder's weights use PyTorch's initialization"
               for k in ("init_W", "init_W_scale", "init_p", "init_p_scale")},
        },
    ),
    "positional_semantic": Entry(
        "attnsim.models.positional_semantic",
        # Cui et al.'s published runs: d = 1000, alpha = 2, T = 2, sigma = 0.5, lr 0.15, 5000 steps
        defaults={
            "n": 2000, "d": 1000, "T": 2, "sigma": 0.5, "lr": 0.15, "steps": 5000, "log_every": 50,
            "test_n": 2000, "pop_points": 65536, "n_weak_aligned": 0, "n_weak_opposite": 0,
            "noise_rate": 0.0, "clean_twin": False, "init": "semantic",
        },
        optimizers=("gd", "adam"),
        inits=("semantic", "positional", "random"),  # Q(0): Q*, 1/sqrt(d), or 0.1 N(0, 1)
        blocks=("Q",),
        weight_decay_with=("gd", "adam"),
        metrics={
            "gen_error": "population error E|Y_hat - Y|^2 / (2 d) per sample",
            "gen_error_se": "its standard error",
            "test_error": "the finite test set's error per sample",
            "magnetization": "|1^T Q| / d",
            "theta": "|Q*^T Q| / d",
            "train_objective": "the summed training loss + (lambda/2) |Q|^2",
            "train_loss_sum": "the summed training loss (Cui et al.'s objective is a sum over samples)",
            "q_norm": "|Q|",
            "linear_gen_error": "the learned linear baseline B xi's population error",
            "linear_gen_error_se": "its standard error",
            "teacher_norm": "|Q*|^2 / (d r): the teacher's draw (mean 1 over seeds; what moves theta)",
        },
        reads=("n", "T", "d", "sigma", "test_n", "rank") + SCHEDULE + POPULATION,
        theory=True,
        renamed={"train_loss": "train_loss_sum"},  # a classifier run's train_loss is a mean
    ),
    "single_location": Entry(
        "attnsim.models.single_location",
        # Marion et al.'s published PGD (their config.py, init on the manifold): d = 400, L = 10,
        # lambda 0.1 (a key of the model's), alpha 4e-3, 20 000 steps
        defaults={
            "n": 1000, "d": 400, "T": 10, "lr": 4e-3, "steps": 20_000, "log_every": 200,
            "integrator": "population", "attention": "erf", "init": "manifold",
            "n_weak_aligned": 0, "n_weak_opposite": 0, "noise_rate": 0.0, "clean_twin": False,
        },
        integrators=("population", "gd", "online"),
        attentions=("erf", "softmax", "linear"),
        inits=("manifold", "sphere"),
        blocks=("k", "v"),
        metrics={
            "risk": "the population risk E[(T(X) - y)^2], label noise included (erf: the closed form)",
            "risk_se": "its standard error (0: the closed form)",
            "test_risk": "the finite test set's mean squared error",
            "test_risk_se": "its standard error",
            "k_kstar": "kappa = k.k*", "v_vstar": "nu = v.v*", "v_kstar": "theta = v.k*",
            "vstar_k": "eta = v*.k", "k_v": "rho = k.v",
            "manifold_distance": "sqrt(theta^2 + eta^2 + rho^2): the distance to the authors' manifold",
            "train_loss": metric_names.SHARED["train_loss"],
        },
        reads=("T", "d", "test_n") + SCHEDULE + POPULATION,
        reads_with={"gd": ("n",), "online": ("batch",)},
    ),
    "linear_icl": Entry(
        "attnsim.models.linear_icl",
        # Lu et al.'s quick figure: d = 32, alpha = tau = 10 (model keys), the ridge endpoint
        defaults={
            "d": 32, "integrator": "ridge", "steps": 1, "log_every": 1, "lr": 1.0,
            "n_weak_aligned": 0, "n_weak_opposite": 0, "noise_rate": 0.0, "clean_twin": False,
        },
        integrators=("ridge", "gd", "flow"),
        engines=("statistics",),  # the sequences' sufficient statistics, never their contexts
        coordinate_engines=("statistics",),
        blocks=("Gamma",),
        metrics={
            "e_icl": "the exact error of Gamma on a fresh sequence of a fresh task (|w| = sqrt d)",
            "e_idg": "the exact error of Gamma on a fresh sequence of a training task",
            "g_task": "e_icl - e_idg: the task generalization gap",
            "train_loss": metric_names.SHARED["train_loss"],
            "gamma_norm": "|Gamma|_F",
        },
        reads=("d", "seed"),
        reads_with={"gd": SCHEDULE + ("init_scale",), "flow": SCHEDULE + ("init_scale",)},
        theory=True,
    ),
    "linear_attention": Entry(
        "attnsim.models.linear_attention",
        # Zhang et al.'s figures: D = 4, N = 31 context pairs, 5 heads, rank one (model keys)
        defaults={
            "d": 4, "n": 0, "integrator": "flow", "lr": 1.0, "steps": 100_000, "log_scale": "log",
            "log_points": 200, "init_scale": 1e-3, "init": "gaussian",
            "n_weak_aligned": 0, "n_weak_opposite": 0, "noise_rate": 0.0, "clean_twin": False,
        },
        integrators=("flow", "gd"),
        inits=("gaussian", "published"),  # N(0, init_scale^2) entries, or the authors' net.py scales
        engines=("moments",),  # the loss as a quadratic in T: its D^2 x D^2 moments
        coordinate_engines=("moments",),
        blocks=("c", "K", "Q", "B"),
        metrics={
            "population_loss": "the population loss E(y_q - y_hat)^2 at the state (exact)",
            "train_loss": metric_names.SHARED["train_loss"],
            "t_norm": "|T|_F, T = sum_i c_i B_i the heads' effective key-query matrix",
            "plateaus": "the saddles' levels the population loss sat at, in order (a list)",
            "plateau_steps": "the first logged step after each plateau the loss left (a list)",
        },
        reads=("d", "seed", "init_scale", "rank") + SCHEDULE,
        reads_with={"gd": ("n",)},
        theory=True,
    ),
}  # fmt: skip

# optimizer name -> its module (KEYS, check, OPTIMIZER; attnsim/optimizers/base.py)
OPTIMIZERS: dict[str, str] = {
    "gd": "attnsim.optimizers.gd",
    "normalized": "attnsim.optimizers.normalized",
    "adam": "attnsim.optimizers.adam",
    "mirror": "attnsim.optimizers.mirror",
}


def engines() -> tuple[str, ...]:
    """Every engine some model runs in, in the registry's order."""
    return tuple(dict.fromkeys(e for entry in MODELS.values() for e in entry.engines))


def capability(name: str) -> tuple[str, ...]:
    """Every value some model declares for a capability field of :class:`Entry`, in the registry's order."""
    if name == "optimizers":
        return tuple(OPTIMIZERS)
    return tuple(dict.fromkeys(v for entry in MODELS.values() for v in getattr(entry, name)))


def model_defaults() -> set[str]:
    """The common keys some model gives a default of its own."""
    return {k for entry in MODELS.values() for k in entry.defaults}


def model_arrays() -> tuple[str, ...]:
    """Every array a data file may hold for some model."""
    return tuple(name for entry in MODELS.values() for name in entry.arrays)


@functools.cache
def keys_module(model: str) -> Any:
    """The model's keys module: ``KEYS`` (a frozen dataclass) and ``check(cfg)``."""
    return importlib.import_module(f"{MODELS[model].module}.keys")


@functools.cache
def optimizer_module(name: str) -> Any:
    """The optimizer's module: ``KEYS`` (a frozen dataclass or None), ``check(cfg)``, ``OPTIMIZER``."""
    return importlib.import_module(OPTIMIZERS[name])


@functools.cache
def _fields(keys: Any) -> tuple:
    """A keys dataclass's fields (by the class itself: a model's KEYS replaced is a new entry)."""
    return () if keys is None else dataclasses.fields(keys)


@functools.cache
def _names(keys: Any) -> frozenset[str]:
    return frozenset(f.name for f in _fields(keys))


def own_keys(model: str) -> dict[str, Any]:
    """The keys only ``model`` reads, with their defaults."""
    return {f.name: f.default for f in key_fields(model)}


def key_fields(model: str) -> tuple:
    """The dataclass fields of the model's keys (name, type, default, help in ``metadata``)."""
    return _fields(keys_module(model).KEYS)


def optimizer_fields(name: str) -> tuple:
    """The dataclass fields of the optimizer's own keys."""
    return _fields(optimizer_module(name).KEYS)


def optimizer_keys(name: str) -> dict[str, Any]:
    """The keys only optimizer ``name`` reads, with their defaults."""
    return {f.name: f.default for f in optimizer_fields(name)}


def foreign_keys(model: str) -> dict[str, Any]:
    """The keys other models own (with their defaults): ``model`` leaves them at their defaults."""
    own = own_keys(model)
    return {k: v for name in MODELS for k, v in own_keys(name).items() if k not in own}


def owner(key: str) -> str | None:
    """The model that owns ``key`` (None: a key of every model)."""
    return next((name for name in MODELS if key in _names(keys_module(name).KEYS)), None)


def optimizer_owner(key: str) -> str | None:
    """The optimizer that owns ``key`` (None: not an optimizer's key)."""
    return next((name for name in OPTIMIZERS if key in optimizer_keys(name)), None)


def key_collisions(common: tuple[str, ...]) -> list[str]:
    """Every name declared twice among the ``common`` keys, the models' and the optimizers' keys
    and the models' metrics: "name: owner, owner" per collision (none in a working registry).
    A metric collides with a config key, with another model's metric of another meaning, and with
    a name a classifier run writes unless it declares that name's meaning word for word
    (:mod:`attnsim.metric_names`)."""
    owners: dict[str, list[str]] = {k: ["every model"] for k in common}
    for name in MODELS:
        for k in own_keys(name):
            owners.setdefault(k, []).append(f"model={name}")
    for name in OPTIMIZERS:
        for k in optimizer_keys(name):
            owners.setdefault(k, []).append(f"optimizer={name}")
    out = [f"{k}: {', '.join(who)}" for k, who in owners.items() if len(who) > 1]
    meant: dict[str, tuple[str, str]] = {}  # metric -> (its first model, its meaning)
    for name, entry in MODELS.items():
        for metric, meaning in entry.metrics.items():
            who = f"a metric of model={name}"
            if metric in owners:
                out.append(f"{metric}: {who} and a config key ({', '.join(owners[metric])})")
            known = metric_names.reserved(metric)
            if known is not None and known != meaning:
                out.append(f"{metric}: {who} ({meaning!r}) and the classifier runs' name ({known!r})")
            first = meant.setdefault(metric, (name, meaning))
            if first[1] != meaning:
                out.append(f"{metric}: {who} ({meaning!r}) and of model={first[0]} ({first[1]!r})")
    return out


def optimizer_class(name: str) -> Any:
    return optimizer_module(name).OPTIMIZER


def optimizers_of(model: str) -> tuple[str, ...]:
    """The optimizers ``model`` runs: those it lists, or (ANY) every registered one whose needs it meets."""
    entry = MODELS[model]
    if entry.optimizers != ANY:
        return tuple(entry.optimizers)
    return tuple(o for o in OPTIMIZERS if set(optimizer_class(o).needs) <= set(entry.blocks))


def weight_decay(cfg: Any) -> float:
    """The weight decay the run's optimizer applies: ``weight_decay`` where the model's use of
    that optimizer has one (AdamW's everywhere; torch SGD's L2 term for the models that say so), else 0."""
    return cfg.weight_decay if cfg.optimizer in MODELS[cfg.model].weight_decay_with else 0.0


def make_optimizer(cfg: Any) -> Any:
    """The run's optimizer (:class:`attnsim.optimizers.base.Optimizer`), for a model's plug-in stepper."""
    return optimizer_class(cfg.optimizer)(cfg, cfg.lr, weight_decay(cfg))


def reads(model: str, integrator: str) -> frozenset[str]:
    """The common keys ``model`` reads under ``integrator`` (beside :data:`FRAMEWORK`)."""
    entry = MODELS[model]
    return frozenset(entry.reads) | frozenset(entry.reads_with.get(integrator, ()))


def model_metrics() -> dict[str, str]:
    """Every metric some model declares (name -> meaning)."""
    return {k: v for entry in MODELS.values() for k, v in entry.metrics.items()}


def register(name: str, entry: Entry, common: tuple[str, ...] = ()) -> None:
    """Add a model (what one line of :data:`MODELS` does, for a model outside the package),
    refusing one whose keys or metrics collide with the ``common`` keys, another model's or
    optimizer's keys or another model's metrics (:func:`key_collisions`): ValueError naming the
    name and its owners (before the registry changes)."""
    if name in MODELS:
        raise ValueError(f"model {name!r} is registered already")
    MODELS[name] = entry
    try:
        clashes = key_collisions(common)
    except BaseException:
        del MODELS[name]
        raise
    if clashes:
        del MODELS[name]
        raise ValueError(f"model {name!r}: names declared twice: {'; '.join(clashes)}")


def spec(model: str) -> Any:
    """The model's ModelSpec (its package is imported here, on first use: the registry sits
    below config and data, which every model's code imports). A spec that does not build a
    stepper (``ModelSpec.integrators``) or a warm-up run (``warm_configs``) for an integrator its
    registry line declares is refused here, when the model's code loads, not in a run."""
    return _checked_spec(model)


@functools.cache
def _checked_spec(model: str) -> Any:
    loaded = importlib.import_module(f"{MODELS[model].module}.spec").SPEC
    declared = MODELS[model].integrators
    has = {"ModelSpec.integrators": getattr(loaded, "integrators", ()), "warm_configs": loaded.warm_configs}
    for where, names in has.items():
        missing = [i for i in declared if i not in names]
        if missing:
            what = "stepper" if where == "ModelSpec.integrators" else "warm-up run"
            raise RuntimeError(
                f"model={model} declares integrator {', '.join(missing)} in its registry line, but its "
                f"spec has no {what} for it ({where})"
            )
    return loaded
