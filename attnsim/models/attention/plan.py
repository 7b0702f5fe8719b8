"""Which engine a run of the attention model uses, and what it will cost (SPEC §4, §9)."""

from __future__ import annotations

from ... import registry
from ..._meta import FRESH_INTEGRATORS, POPULATION_INTEGRATORS
from ...config import Config, ConfigError
from ...runtime.resources import GD_FLOPS_PER_S, check_fits

DENSE_MAX_BYTES = 2 * 1024**3  # auto stops using a d x d W(0) above this
BLAS_THREADS_FROM_D = 6000  # setups at this d and above use every BLAS thread
KEEP_W0_BYTES = 256 * 1024**2  # setups up to d = 5792 draw W(0) once into a reused array


def choose_engine(cfg: Config, user_data: bool) -> tuple[str, str]:
    """The engine to use and why (SPEC §4)."""
    dense_bytes = 8.0 * cfg.d * cfg.d
    if cfg.integrator in FRESH_INTEGRATORS:
        return _fresh_engine(cfg, user_data)
    if registry.optimizer_class(cfg.optimizer).coordinatewise:
        return _coordinate_engine(cfg, dense_bytes)
    if cfg.precision_twin != "none" and dense_bytes > DENSE_MAX_BYTES:
        raise ConfigError(
            f"d: precision_twin holds d x d arrays as torch does (W and W(0) in the twin's format, W(0) "
            f"in float64 to start it from the run's): at d = {cfg.d} a float64 one takes "
            f"{dense_bytes / 1e9:.3g} GB, above the {DENSE_MAX_BYTES / 1e9:.3g} GB a d x d array may take"
        )
    if cfg.engine == "implicit":
        _check_implicit(cfg, user_data)
        return "implicit", "requested"
    if cfg.engine != "auto":
        return cfg.engine, "requested"
    dense_step, reduced_step = step_flops(cfg, "dense"), step_flops(cfg, "reduced")
    if dense_bytes <= DENSE_MAX_BYTES and dense_step <= reduced_step:
        return "dense", (
            f"auto: the reduced coordinates would not be smaller (n*T + 2 = {cfg.n * cfg.T + 2} >= "
            f"d = {cfg.d}): "
            f"dense costs {dense_step:.3g} flops per step, reduced {reduced_step:.3g}"
        )
    if dense_bytes <= DENSE_MAX_BYTES:
        return "reduced", "auto: exact reduced coordinates (cost independent of d)"
    if cfg.init_W == "identity":  # the reduced setup needs no pass over a d x d W(0) = I
        return "reduced", "auto: exact reduced coordinates (W(0) = I needs no d x d array)"
    why = f"auto: a {cfg.d} x {cfg.d} W(0) would need {dense_bytes / 1e9:.3g} GB"
    try:
        _check_implicit(cfg, user_data)
    except ConfigError as exc:
        raise ConfigError(f"{why}; {exc}") from None
    return "implicit", why + "; implicit Bartlett construction"


def _fresh_engine(cfg: Config, user_data: bool) -> tuple[str, str]:
    """The coordinates of the integrators that see fresh samples (SPEC §17)."""
    if user_data:
        raise ConfigError(
            f"integrator: {cfg.integrator} draws fresh samples from the data model; a data file has a "
            "fixed training set (integrator=gd or flow)"
        )
    if cfg.integrator in POPULATION_INTEGRATORS:
        return "population", (
            f"integrator={cfg.integrator}: the state's coordinates on span{{mu+, mu-, p(0)}} (W(0) = I), the "
            "population risk's gradient by quasi-random quadrature there"
        )
    frame = cfg.init_W == "identity" and "W" not in cfg.train_set
    if cfg.engine == "implicit" and not frame:
        raise ConfigError(
            "engine: implicit online SGD needs W fixed at the identity (init_W=identity, train = p, nu or "
            "p,nu); use engine=dense"
        )
    if frame and cfg.engine in ("auto", "implicit"):
        return "implicit", (
            f"{'requested' if cfg.engine == 'implicit' else 'auto'}: online SGD with W = I in the frame "
            "{mu+, mu-, q_perp, nu_perp}: each batch's noise outside it drawn as one Bartlett factor "
            "(exact in distribution at any d)"
        )
    if 8.0 * cfg.d * cfg.d > DENSE_MAX_BYTES and cfg.engine == "auto":
        raise ConfigError(
            f"d: online SGD with W trained or W(0) random keeps a {cfg.d} x {cfg.d} W "
            f"({8e-9 * cfg.d * cfg.d:.3g} GB); set init_W=identity with train = p, nu or p,nu, or a smaller d"
        )
    return (
        "dense",
        f"{'requested' if cfg.engine == 'dense' else 'auto'}: online SGD on fresh d-dimensional batches",
    )


POPULATION_SAMPLES = 1 << 14  # quasi-random fresh samples of the population gradient (half per class)


def batch_size(cfg: Config) -> int:
    """Fresh samples per online step (``batch``; 0 means n)."""
    return cfg.batch or cfg.n


def step_flops(cfg: Config, engine: str) -> float:
    """Flops of one GD step of the attention model: the W pass and q = W p
    (4 k r) and the token products (4 n T k), k = r = d (dense) or about
    n T + 2 (reduced)."""
    m = cfg.n * cfg.T
    if engine == "population":
        return 2 * 40.0 * POPULATION_SAMPLES * cfg.T
    if engine == "implicit" and cfg.integrator == "online":
        return 60.0 * batch_size(cfg) * cfg.T
    if cfg.integrator == "online":  # dense: the batch drawn and its two products, and W's update
        return 40.0 * batch_size(cfg) * cfg.T * cfg.d + 4.0 * cfg.d * cfg.d
    k = cfg.d if engine == "dense" else min(m + 2, cfg.d)
    r = k + (cfg.init_p != "zeros")
    return 4.0 * k * r + 4.0 * m * k


TOKEN_FLOPS = 1000.0  # a step's work per token beyond its multiply-adds (its exp, the softmax's passes)
FLOW_EVALUATIONS = 20_000  # vector fields a flow evaluates, about (5 000 - 15 000 to 1e14 steps)


def setup_flops(cfg: Config, engine: str) -> float:
    """A reduced setup shared by a sweep group: two d x d x k products (k about n T + 2), or
    for W(0) = I the basis alone (three d k^2 products); nothing for the other engines."""
    if engine != "reduced":
        return 0.0
    k = min(cfg.n * cfg.T + 2, cfg.d)
    return 3.0 * cfg.d * k * k if cfg.init_W == "identity" else 4.0 * cfg.d * cfg.d * k


def run_flops(cfg: Config, engine: str) -> float:
    """A run's work after its setup, for ordering (sweeps start the costliest first): its GD
    steps with the per-token work of the softmax, or a flow's evaluations of its field
    (about ``FLOW_EVALUATIONS``, whatever the span of time); the clean-label twin doubles it;
    a precision twin adds its d x d passes (six per step, an AdamW one three times that)."""
    per = step_flops(cfg, engine) + TOKEN_FLOPS * cfg.n * cfg.T
    steps = min(cfg.steps, FLOW_EVALUATIONS) if cfg.integrator in ("flow", "population_flow") else cfg.steps
    work = steps * per * (2.0 if cfg.clean_twin and cfg.noise_rate else 1.0)
    if cfg.precision_twin != "none":
        work += cfg.steps * 6.0 * cfg.d * cfg.d * (3.0 if cfg.optimizer == "adam" else 1.0)
    return work


def n_log_points(steps: int, log_scale: str, log_every: int, log_points: int) -> int:
    """How many log points :func:`attnsim.driver.log_grid` will make (at most)."""
    if log_scale == "linear":
        return steps // log_every + 2
    return log_points + 1


def keeps_w0(d: int) -> bool:
    """Whether the reduced setup keeps all of a d x d W(0) (drawn once) rather
    than streaming it in row blocks (drawn twice)."""
    return 8.0 * d * d <= KEEP_W0_BYTES


def memory_estimate(cfg: Config, engine: str, save_scores: bool = False) -> list[tuple[str, str, float]]:
    """(keys, what, bytes) of the large arrays a run allocates, a conservative estimate."""
    n, T, d, m = cfg.n, cfg.T, cfg.d, cfg.n * cfg.T
    if engine == "population":
        return [
            (
                "T",
                f"the quadrature sample ({POPULATION_SAMPLES}*T*3 floats, 2 label copies)",
                8.0 * POPULATION_SAMPLES * T * 12,
            )
        ]
    sample_keys = "n, T, d"
    if cfg.integrator == "online":
        n = max(n, batch_size(cfg))
        m = n * T
        sample_keys = "batch, T, d" if batch_size(cfg) >= cfg.n else sample_keys  # the batch sets the size
    k = d if engine == "dense" else min(m + 2, d)
    r = k + 1
    f = 8.0
    items = []
    if engine != "implicit":
        items.append(
            (
                sample_keys,
                f"the {'batch' if sample_keys.startswith('batch') else 'training'} tokens X "
                f"({sample_keys.split(',')[0]}*T*d = {n:.3g}*{T:.3g}*{d:.3g} floats)",
                f * n * T * d,
            )
        )
    if engine == "dense":
        items.append(("d", f"W, W(0) and the update buffers (3 d^2 = 3*{d:.3g}^2 floats)", 3 * f * d * d))
    elif engine == "reduced":
        items.append(("n, T, d", f"the bases Q, R and W(0) R (4 d k floats, k = {k:.3g})", 4 * f * d * k))
        if keeps_w0(d):
            items.append(("d", "W(0)", f * d * d))
        else:
            items.append(("d", "W(0) row blocks", f * max(1 << 22, 64.0 * d)))
    if cfg.integrator == "online":  # every step draws its batch's tokens, in d or in the frame's k
        b = batch_size(cfg)
        what = (
            f"a batch's tokens, their coordinates and scores (batch*T*(k+3) = {b:.3g}*{T}*{k + 3:.3g} floats)"
        )
        items.append(("batch, T", what, f * b * T * (k + 3)))
    if cfg.precision_twin != "none":
        blocks = 3 + 2 * (cfg.optimizer == "adam")  # W, W(0), dW (and AdamW's moments)
        what = f"the precision twin's {blocks} d x d arrays, X, X W and dA ({cfg.precision_twin})"
        items.append(("precision_twin, d", what, f * (blocks * d * d + 3 * m * d)))
    if engine != "dense":
        what = f"the reduced W, W(0), factors, X W, X W(0) and X X^T (8 k^2 floats, k = {k:.3g})"
        items.append(("n, T", what, 8 * f * k * r))
    items.append(
        (
            "test_n, T",
            f"the test set (test_n*T*(k+r) = {cfg.test_n:.3g}*{T}*{k + r:.3g} floats)",
            f * cfg.test_n * T * (k + r),
        )
    )
    items.append(
        ("pop_points", f"the population points ({cfg.pop_points:.3g}*T floats)", f * cfg.pop_points * T)
    )
    L = n_log_points(cfg.steps, cfg.log_scale, cfg.log_every, cfg.log_points)
    per = f * m * (6 if save_scores else 3) + 600 * f
    keys = "steps, log_every" if cfg.log_scale == "linear" else "log_points"
    if sample_keys.startswith("batch"):  # each log point keeps the monitor's n samples, not the batch
        per = f * cfg.n * T * (6 if save_scores else 3) + 600 * f
    items.append((keys, f"the log ({L:.3g} log points of {per:.3g} bytes)", L * per))
    return items


W0_NUMBERS_PER_S = (
    2e8  # drawing and scaling W(0)'s numbers here (optimistic: only hopeless setups are refused)
)
MAX_SETUP_SECONDS = 3600.0


def setup_seconds(cfg: Config, engine: str) -> float:
    """An optimistic estimate of the reduced setup's time: W(0) drawn (twice when it
    is streamed in blocks) and its two d^2 k products; 0 for the other engines and W(0) = I."""
    if engine != "reduced" or cfg.init_W == "identity":
        return 0.0
    k = min(cfg.n * cfg.T + 2, cfg.d)
    draws = (1 if keeps_w0(cfg.d) else 2) * float(cfg.d) ** 2
    return draws / W0_NUMBERS_PER_S + 4.0 * float(cfg.d) ** 2 * k / GD_FLOPS_PER_S


def check_resources(cfg: Config, engine: str, save_scores: bool = False) -> None:
    """Refuse, before anything is allocated, a run that cannot fit in memory or
    finish, its setup included: one line naming the keys and the estimate (ConfigError, exit 2)."""
    k = cfg.d if engine == "dense" else min(cfg.n * cfg.T + 2, cfg.d)
    flops = 6.0 * k * (k + 1) + 4.0 * cfg.n * cfg.T * k if cfg.integrator == "gd" else 0.0
    if cfg.integrator in ("population", "online"):  # the flows' steps are time, not work
        flops = step_flops(cfg, engine)
    keys = "batch, steps" if cfg.integrator == "online" else "steps"
    check_fits(memory_estimate(cfg, engine, save_scores), cfg.steps, flops, ConfigError, keys)
    seconds = setup_seconds(cfg, engine)
    if seconds > MAX_SETUP_SECONDS:
        raise ConfigError(
            f"d: the reduced setup at d = {cfg.d:.3g} draws a {cfg.d:.3g} x {cfg.d:.3g} W(0) and multiplies "
            f"by it, about {seconds / 3600:.3g} hours here at best; init_W=identity needs no W(0) pass, and "
            "init_W=gaussian with engine=implicit none of size d"
        )


def _coordinate_engine(cfg: Config, dense_bytes: float) -> tuple[str, str]:
    """An optimizer whose step depends on the basis (AdamW scales each coordinate of d by its own
    second moment; l_p mirror descent's potential is not rotation invariant): neither the reduced
    subspace's rotation nor the implicit factors keep its steps, so dense or nothing (config
    validation refused another engine by name)."""
    if dense_bytes > DENSE_MAX_BYTES:
        gb, most = dense_bytes / 1e9, DENSE_MAX_BYTES / 1e9
        raise ConfigError(
            f"d: optimizer={cfg.optimizer} runs in the dense engine, and a {cfg.d} x {cfg.d} W "
            f"would need {gb:.3g} GB (at most {most:.3g})"
        )
    why = f"auto: optimizer={cfg.optimizer} is exact in d coordinates only"
    return "dense", "requested" if cfg.engine == "dense" else why


def _check_implicit(cfg: Config, user_data: bool) -> None:
    if cfg.data_model != "sakamoto2025":
        raise ConfigError(
            f"engine: implicit draws data_model=sakamoto2025 only; {cfg.data_model} runs in "
            "engine dense or reduced"
        )
    if user_data:
        raise ConfigError("engine: implicit draws its own data; --data needs engine dense or reduced")
    if cfg.init_W != "gaussian":
        raise ConfigError(f"init_W: the implicit engine needs init_W=gaussian (got {cfg.init_W})")
    if cfg.init_p != "zeros":
        raise ConfigError(f"init_p: the implicit engine needs init_p=zeros (got {cfg.init_p})")
    m = cfg.n * cfg.T
    if cfg.d < m + 3:
        raise ConfigError(f"d: the implicit engine needs d >= n*T + 3 = {m + 3} (got {cfg.d})")


SETUP_KEYS = ("seed", "n", "T", "d", "sigma", "init_W", "init_W_scale", "init_p", "init_p_scale")


def setup_key(cfg: Config) -> tuple:
    """What the reduced setup of generated data depends on. span(Q) holds the
    token noise and e1, e2 whatever the signal strength, so runs that differ
    only in signal_norm, rho, labels, lr, steps, ... share the token noise (in
    Q coordinates), Q, R, W~(0) and U (sweeps group their points by this key)."""
    c = cfg.to_dict()
    return tuple(c[k] for k in SETUP_KEYS)
