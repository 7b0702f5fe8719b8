"""Engines: the coordinates in which gradient descent is simulated (SPEC §4).

Every engine produces a :class:`Problem`: training tokens X2 (nT, k), an
initial state W (k, r), p (r,), nu (k,), and the geometry needed for exact
population metrics in those coordinates. The kernels never know which engine
built their arrays.

dense
    k = r = d; W is the full d x d matrix. The reference.
reduced
    GD never leaves a small subspace. Q (d x k) is an orthonormal basis of
    span{training tokens, nu, mu+, mu-}; R (d x r) one of span{W(0)^T Q} plus
    p(0) when p(0) != 0. Every gradient g = sum c_it x_it lies in span(Q), so
    W - W(0) stays in Q (.) R^T, p in span(R) and nu in span(Q). With
    X~ = X Q, W~ = Q^T W R, p~ = R^T p and nu~ = Q^T nu the same kernels give the
    dense trajectory exactly. The part of q = W p outside span(Q) is
    H p~ with H = (I - QQ^T) W(0) R; only its Gram matrix matters, kept as the
    triangular factor U with U^T U = H^T H.
implicit
    For Gaussian W(0), p(0) = 0 and generated data nothing of size d is formed.
    In the basis {e1, e2, token-noise span}: the noise of the nT training
    tokens has i.i.d. N(0, sigma^2) coordinates on e1, e2 and a lower-triangular
    Bartlett factor on the rest (chi with d-2, d-3, ... degrees of freedom on
    the diagonal, N(0, sigma^2) below). W(0)^T Q is a d x k Gaussian matrix
    (Q is independent of W(0)); its R-factor B (chi with d, d-1, ...) gives
    W~(0) = B^T, and H = Q_perp^T W(0) R is a (d-k) x k Gaussian matrix
    independent of the rest, whose Gram matrix is U^T U with U its Bartlett
    factor, upper-trapezoidal ((d-k) x k) when d - k < k. Exact in distribution
    for any d >= nT + 3 at O(k^3 + steps k^2) cost.

Test sets drawn for a run live in the engine's coordinates: a fresh token is
its mean plus sigma times k i.i.d. normals on Q, and its product with the part
of W(0) R outside span(Q) is sigma g . (U p~) with rows(U) more normals, the
same numbers at every step. Dense test tensors appear only when the user
supplies X_test.
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from .config import Config, ConfigError
from .data import (
    Dataset,
    Streams,
    W0_block_rows,
    W0_blocks,
    assemble,
    draw_implicit_init,
    draw_implicit_noise,
    draw_labels,
    draw_noise,
    draw_p0,
    draw_test_set,
    draw_W0,
    fill_W0,
    generate,
    signals,
)
from .parallel import halves, submit

DENSE_MAX_BYTES = 2 * 1024**3  # auto stops using a d x d W(0) above this
KEEP_W0_BYTES = 256 * 1024**2  # setups up to d = 5792 draw W(0) once into a reused array
SETUP_CACHE_SIZE = 4  # reduced setups kept per process (sweeps share them across signal strengths)
SETUP_CACHE: OrderedDict = OrderedDict()


@dataclass
class Problem:
    """Everything the GD driver and the metrics need, in engine coordinates.

    Attributes
    ----------
    X2 : (n*T, k) training tokens.   y : (n,) observed labels.   T : tokens per sample.
    W0 : (k, r), p0 : (r,), nu0 : (k,) initial state.
    mu_pos, mu_neg : (k,) class signals in engine coordinates (None if unknown).
    U_perp : (rho, r) with ||q_perp||^2 = ||U_perp p||^2 (None: q lies in span(Q)).
    X2_test : (m*T, k) test tokens; O_test : (m*T, r) their products with the
    part of W(0) R outside span(Q) (None when zero); y_test : (m,).
    """

    engine: str
    reason: str
    X2: np.ndarray
    y: np.ndarray
    T: int
    W0: np.ndarray
    p0: np.ndarray
    nu0: np.ndarray
    mu_pos: np.ndarray | None
    mu_neg: np.ndarray | None
    U_perp: np.ndarray | None = None
    X2_test: np.ndarray | None = None
    O_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    Q: np.ndarray | None = None
    R: np.ndarray | None = None
    W0_source: object = None  # W(0) itself, or (config, generator) to redraw it
    info: dict = field(default_factory=dict)

    @property
    def k(self) -> int:
        return self.X2.shape[1]

    @property
    def r(self) -> int:
        return self.p0.size

    def q_norm2(
        self, W: np.ndarray | None, p: np.ndarray, q: np.ndarray | None = None
    ) -> tuple[np.ndarray, float]:
        """q in engine coordinates (Q^T q; W p unless given) and the full ||q||^2."""
        qk = W @ p if q is None else q
        qq = float(qk @ qk)
        if self.U_perp is not None:
            h = self.U_perp @ p
            qq += float(h @ h)
        return qk, qq

    def stepper(self, cfg: Config, rel: np.ndarray, y: np.ndarray | None = None):
        """The model stepper of this problem: GD steps (in the X W form when
        log points are far apart, see :func:`attnsim.kernels.make_segment`),
        or the gradient flow; trained on the labels ``y`` (default: the
        problem's observed labels)."""
        from .dynamics import GradientFlow
        from .kernels import FlowField, SegmentXW, make_segment

        y = self.y if y is None else y
        args = (self.X2, y, self.W0, self.p0, self.nu0, self.T, cfg.lr, cfg.train_set, cfg.loss, rel)
        if cfg.integrator == "gd":
            seg = make_segment(*args, log_gap=cfg.steps / max(1, n_log_points(cfg) - 1))
            self.info["gd_state"] = "X W (n*T x r)" if isinstance(seg, SegmentXW) else "W (k x r)"
            return seg
        return GradientFlow(FlowField(*args), y.size, cfg.lr, cfg.flow_method, cfg.flow_rtol, cfg.flow_atol)

    def evaluator(self, cfg: Config, pop):
        """Test-set and population metrics of a state, or None when there are
        neither. Its ``defer(state)`` returns a job whose ``result()`` gives the
        same dict: the population part runs on the background thread
        (:func:`attnsim.parallel.in_background`) from the state's scalars, so
        the caller may move the state on at once."""
        from .kernels import state_q
        from .metrics import test_set_metrics
        from .parallel import in_background
        from .population import state_scalars

        if self.X2_test is None and pop is None:
            return None

        def test_part(state) -> dict:
            if self.X2_test is None:
                return {}
            W, p, nu = state["W"], state["p"], state["nu"]
            return test_set_metrics(self.X2_test, self.O_test, self.y_test, self.T, W, p, nu, cfg.loss)

        def scalars(state) -> tuple[float, ...]:
            return state_scalars(self, None, state["p"], state["nu"], q=state_q(state))

        def evaluate(state) -> dict:
            out = test_part(state)
            if pop is not None:
                out.update(pop.evaluate(*scalars(state)))
            return out

        def defer(state) -> _Deferred:
            job = None if pop is None else in_background(_quiet_call, pop.evaluate, scalars(state))
            return _Deferred(test_part(state), job)

        evaluate.defer = defer
        return evaluate

    def W0_full(self) -> np.ndarray:
        """The d x d W(0) (redrawn from its stream when it was not kept)."""
        if isinstance(self.W0_source, np.ndarray):
            return self.W0_source
        cfg, rng = self.W0_source
        return draw_W0(cfg, copy.deepcopy(rng), self.Q.shape[0])

    def lift(self, W: np.ndarray, p: np.ndarray, nu: np.ndarray) -> dict[str, np.ndarray]:
        """Full-space W, p, q = W p and nu (dense engine: the arrays themselves)."""
        if self.engine == "dense":
            return {"W": W, "p": p, "q": W @ p, "nu": nu}
        if self.engine == "implicit":
            raise ValueError("the implicit engine has no d-dimensional state to lift to")
        Q, R, W0 = self.Q, self.R, self.W0_full()
        dW = W - self.W0
        return {
            "W": W0 + Q @ dW @ R.T,
            "p": R @ p,
            "q": W0 @ (R @ p) + Q @ (dW @ p),
            "nu": Q @ nu,
        }


def choose_engine(cfg: Config, user_data: bool) -> tuple[str, str]:
    """The engine to use and why (SPEC §4)."""
    if cfg.model == "encoder":
        from .encoder import check_config

        check_config(cfg, user_data)
        return "dense", "the encoder runs in d dimensions (only the CLS path is computed)"
    dense_bytes = 8.0 * cfg.d * cfg.d
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
    why = f"auto: a {cfg.d} x {cfg.d} W(0) would need {dense_bytes / 1e9:.3g} GB"
    try:
        _check_implicit(cfg, user_data)
    except ConfigError as exc:
        raise ConfigError(f"{why}; {exc}") from None
    return "implicit", why + "; implicit Bartlett construction"


GD_FLOPS_PER_S = 1e10  # optimistic, so only hopeless runs are refused
MAX_GD_SECONDS = 30 * 86400


def step_flops(cfg: Config, engine: str) -> float:
    """Flops of one GD step of the attention model: the W pass and q = W p
    (4 k r) and the token products (4 n T k), k = r = d (dense) or about
    n T + 2 (reduced)."""
    m = cfg.n * cfg.T
    k = cfg.d if engine == "dense" else min(m + 2, cfg.d)
    r = k + (cfg.init_p != "zeros")
    return 4.0 * k * r + 4.0 * m * k


def n_log_points(cfg: Config) -> int:
    """How many log points :func:`attnsim.dynamics.log_grid` will make (at most)."""
    if cfg.log_scale == "linear":
        return cfg.steps // cfg.log_every + 2
    return cfg.log_points + 1


def physical_memory() -> float:
    """Bytes of RAM of this machine (inf when the OS does not say)."""
    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return math.inf


def memory_estimate(cfg: Config, engine: str, save_scores: bool = False) -> list[tuple[str, str, float]]:
    """(keys, what, bytes) of the large arrays a run allocates, a conservative estimate."""
    n, T, d, m = cfg.n, cfg.T, cfg.d, cfg.n * cfg.T
    if cfg.model == "encoder":
        params = 3.0 * d * d + 2.0 * d * cfg.mlp_dim
        return [
            (
                "d, mlp_dim",
                f"the encoder's parameters, gradients and a copy (3 x {params:.3g} floats)",
                24 * params,
            ),
            ("n, T, d", "the training tokens and their LayerNorm (3 n*T*d floats)", 24.0 * n * T * d),
            (
                "test_n, T, d",
                f"the test set (test_n*T*d = {cfg.test_n:.3g}*{T}*{d} floats)",
                8.0 * cfg.test_n * T * d,
            ),
        ]
    k = d if engine == "dense" else min(m + 2, d)
    r = k + 1
    f = 8.0
    items = []
    if engine != "implicit":
        items.append(
            ("n, T, d", f"the training tokens X (n*T*d = {n:.3g}*{T:.3g}*{d:.3g} floats)", f * n * T * d)
        )
    if engine == "dense":
        items.append(("d", f"W, W(0) and the update buffers (3 d^2 = 3*{d:.3g}^2 floats)", 3 * f * d * d))
    elif engine == "reduced":
        items.append(("n, T, d", f"the bases Q, R and W(0) R (4 d k floats, k = {k:.3g})", 4 * f * d * k))
        if keeps_w0(d):
            items.append(("d", "W(0)", f * d * d))
        else:
            items.append(("d", "W(0) row blocks", f * max(1 << 22, 64.0 * d)))
    if engine != "dense":
        what = f"the reduced W, W(0), factors, X W, X W(0) and X X^T (8 k^2 floats, k = {k:.3g})"
        items.append(("n, T", what, 8 * f * k * r))
    items.append(("test_n, T", f"the test set (test_n*T*(k+r) = {cfg.test_n:.3g}*{T}*{k + r:.3g} floats)",
                  f * cfg.test_n * T * (k + r)))  # fmt: skip
    items.append(
        ("pop_points", f"the population points ({cfg.pop_points:.3g}*T floats)", f * cfg.pop_points * T)
    )
    L = n_log_points(cfg)
    per = f * m * (6 if save_scores else 3) + 600 * f
    keys = "steps, log_every" if cfg.log_scale == "linear" else "log_points"
    items.append((keys, f"the log ({L:.3g} log points of {per:.3g} bytes)", L * per))
    return items


def check_resources(cfg: Config, engine: str, save_scores: bool = False) -> None:
    """Refuse, before anything is allocated, a run that cannot fit in memory or
    finish: one line naming the keys and the estimate (ConfigError, exit 2)."""
    items = memory_estimate(cfg, engine, save_scores)
    total = sum(b for _, _, b in items)
    have = physical_memory()
    if total > 0.8 * have:
        keys, what, b = max(items, key=lambda it: it[2])
        raise ConfigError(
            f"{keys}: the run needs about {_bytes(total)} of memory, mostly {what}: {_bytes(b)}; "
            f"this machine has {_bytes(have)}"
        )
    if cfg.integrator == "gd":
        k = cfg.d if engine == "dense" else min(cfg.n * cfg.T + 2, cfg.d)
        seconds = cfg.steps * (6.0 * k * (k + 1) + 4.0 * cfg.n * cfg.T * k) / GD_FLOPS_PER_S
        if cfg.model == "encoder":
            seconds = cfg.steps * 12.0 * cfg.n * cfg.d * (cfg.d + cfg.mlp_dim) / GD_FLOPS_PER_S
        if seconds > MAX_GD_SECONDS:
            raise ConfigError(
                f"steps: {cfg.steps:.3g} GD steps would take about {seconds / 3.15e7:.3g} years here; "
                "integrator=flow follows the same dynamics to 1e14 steps in seconds"
            )


def _bytes(b: float) -> str:
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.3g} bytes"


def _check_implicit(cfg: Config, user_data: bool) -> None:
    if user_data:
        raise ConfigError("engine: implicit draws its own data; --data needs engine dense or reduced")
    if cfg.init_W != "gaussian":
        raise ConfigError(f"init_W: the implicit engine needs init_W=gaussian (got {cfg.init_W})")
    if cfg.init_p != "zeros":
        raise ConfigError(f"init_p: the implicit engine needs init_p=zeros (got {cfg.init_p})")
    m = cfg.n * cfg.T
    if cfg.d < m + 3:
        raise ConfigError(f"d: the implicit engine needs d >= n*T + 3 = {m + 3} (got {cfg.d})")


def build(
    cfg: Config, ds: Dataset | None, streams: Streams, engine: str, reason: str
) -> tuple[Problem, Dataset]:
    """Set up an engine for the user's dataset ``ds``, or for generated data
    (``ds`` None); returns the problem and the dataset (whose tokens live in
    the problem for the reduced and implicit engines)."""
    if engine == "implicit":
        return build_implicit(cfg, streams, reason)
    if ds is None and engine == "reduced":
        pb, ds = _build_reduced_generated(cfg, streams, reason)
    else:
        if ds is None:
            ds = generate(cfg, streams)
        pb = (
            _build_dense(cfg, ds, streams, reason)
            if engine == "dense"
            else _build_reduced(cfg, ds, streams, reason)
        )
    _attach_test(cfg, ds, streams, pb)
    return pb, ds


def _flat(X: np.ndarray | None) -> np.ndarray | None:
    return None if X is None else np.ascontiguousarray(X.reshape(-1, X.shape[2]))


def _build_dense(cfg: Config, ds: Dataset, streams: Streams, reason: str) -> Problem:
    d = ds.X.shape[2]
    W0 = ds.W0 if ds.W0 is not None else draw_W0(cfg, streams.init, d)
    p0 = ds.p0 if ds.p0 is not None else draw_p0(cfg, streams.init, d)
    return Problem(
        engine="dense",
        reason=reason,
        X2=_flat(ds.X),
        y=ds.y,
        T=ds.X.shape[1],
        W0=np.ascontiguousarray(W0),
        p0=np.ascontiguousarray(p0),
        nu0=ds.nu.copy(),
        mu_pos=ds.mu_pos,
        mu_neg=ds.mu_neg,
        W0_source=W0,
    )


class _Deferred:
    """Metrics computed now (``done``) plus those of a background job."""

    def __init__(self, done: dict, job):
        self.done, self.job = done, job

    def result(self) -> dict:
        return self.done if self.job is None else {**self.done, **self.job.result()}

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()


def _quiet_call(fn, args):
    """fn(*args) with overflow and invalid-value warnings off (as the driver
    runs evaluations; NumPy's error state is per thread)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return fn(*args)


def orthonormal_basis(A: np.ndarray, rtol: float = 1e-10, with_factor: bool = False):
    """Orthonormal basis Q (d, k) of the column span of A (d, m); with
    ``with_factor`` also T (k, m) with A = Q T.

    Cholesky-QR of the m x m Gram matrix (d m^2 flops, cheaper than
    Householder QR for d >> m). The Gram matrix of the result is checked: if
    it is the identity to 1e-13 (well-conditioned input, the usual case for
    noisy tokens) one pass is enough, otherwise a second pass restores
    orthogonality to machine precision. Rank-deficient or ill-conditioned
    input falls back to an SVD that drops directions below ``rtol`` times the
    largest singular value.
    """
    if A.shape[1] == 0:
        Q = np.zeros((A.shape[0], 0))
        return (Q, np.zeros((0, 0))) if with_factor else Q
    try:
        L1 = np.linalg.cholesky(A.T @ A)
        Q = _times_inverse_transpose(A, L1)  # A = Q L1^T
        G = Q.T @ Q
        eye = np.eye(G.shape[0])
        if np.abs(G - eye).max() < 1e-13:
            return (Q, L1.T) if with_factor else Q
        L2 = np.linalg.cholesky(G)
        if np.abs(L2 - eye).max() < 1e-8 and np.abs(np.diag(L1)).min() > 1e-6:
            Q = _times_inverse_transpose(Q, L2)  # A = Q L2^T L1^T
            return (Q, L2.T @ L1.T) if with_factor else Q
    except np.linalg.LinAlgError:
        pass
    U, sv, Vt = np.linalg.svd(A, full_matrices=False)
    keep = sv > rtol * sv[0]
    Q = np.ascontiguousarray(U[:, keep])
    return (Q, sv[keep, None] * Vt[keep]) if with_factor else Q


def _times_inverse_transpose(A: np.ndarray, L: np.ndarray) -> np.ndarray:
    """A L^-T (C-contiguous) for a lower-triangular L (m x m), by L's explicit
    inverse and one matrix product: twice as fast here as a triangular solve
    with d right-hand sides (LAPACK's solve runs at a fraction of the product's
    rate for m = 162); the second pass and the Gram check of
    :func:`orthonormal_basis` see to the accuracy."""
    from scipy.linalg import lapack  # here: planning a sweep imports this module, and needs no SciPy

    Linv, info = lapack.dtrtri(L, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError("singular triangular factor")
    return A @ Linv.T


def psd_factor(G: np.ndarray) -> np.ndarray:
    """A factor U with U^T U = G for a symmetric positive semi-definite G
    known up to rounding (Cholesky; eigenvalues clipped at 0 when G is
    singular, as when W(0) R lies in span(Q))."""
    G = 0.5 * (G + G.T)
    try:
        return np.ascontiguousarray(np.linalg.cholesky(G).T)
    except np.linalg.LinAlgError:
        lam, V = np.linalg.eigh(G)
        return np.ascontiguousarray(np.sqrt(np.clip(lam, 0.0, None))[:, None] * V.T)


def extend_basis(Q: np.ndarray, v: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """Q with the direction of v outside span(Q) appended (if there is one)."""
    norm = np.linalg.norm(v)
    if norm == 0:
        return Q
    res = v - Q @ (Q.T @ v)
    res = res - Q @ (Q.T @ res)  # twice is enough (Kahan-Parlett)
    rn = np.linalg.norm(res)
    if rn <= rtol * norm:
        return Q
    return np.ascontiguousarray(np.concatenate([Q, (res / rn)[:, None]], axis=1))


SETUP_KEYS = ("seed", "n", "T", "d", "sigma", "init_W", "init_W_scale", "init_p", "init_p_scale")


def setup_key(cfg: Config) -> tuple:
    """What the reduced setup of generated data depends on. span(Q) holds the
    token noise and e1, e2 whatever the signal strength, so runs that differ
    only in signal_norm, rho, labels, lr, steps, ... share the token noise (in
    Q coordinates), Q, R, W~(0) and U (sweeps group their points by this key)."""
    c = cfg.to_dict()
    return tuple(c[k] for k in SETUP_KEYS)


def _build_reduced_generated(cfg: Config, streams: Streams, reason: str) -> tuple[Problem, Dataset]:
    """The reduced engine for generated data, its setup shared through SETUP_CACHE.

    The token noise is kept in Q coordinates with the data stream's state
    after it, so a cached setup skips the noise draw and still draws the same
    labels; the signals are added in Q coordinates.
    """
    key = setup_key(cfg)
    if key in SETUP_CACHE:
        SETUP_CACHE.move_to_end(key)
        setup, noise_Q, after = SETUP_CACHE[key]
    else:
        w0 = _start_W0(cfg, streams, cfg.d)  # on the other threads while the noise is drawn
        noise = draw_noise(cfg, streams.data)
        after = copy.deepcopy(streams.data)  # the labels come next from this stream
        setup = _reduced_setup(cfg, noise, None, None, None, None, None, streams, generated=True, w0=w0)
        noise_Q = setup.pop("tokens_Q")
        SETUP_CACHE[key] = (setup, noise_Q, after)
        while len(SETUP_CACHE) > SETUP_CACHE_SIZE:
            SETUP_CACHE.popitem(last=False)
    streams.data = copy.deepcopy(after)
    Q = setup["Q"]
    # the signals |mu| e1, |mu| e2 in Q coordinates: Q^T mu = |mu| times a row of Q (the same
    # numbers as the product, without reading all of Q)
    mu_pos, mu_neg = cfg.signal_norm * Q[0], cfg.signal_norm * Q[1]
    X = noise_Q.reshape(cfg.n, cfg.T, -1).copy()
    ds = assemble(cfg, X, *draw_labels(cfg, streams.data), mu_pos, mu_neg, source="generated")
    ds.X = None  # the tokens live in the problem, in Q coordinates
    pb = Problem(engine="reduced", reason=reason, X2=X.reshape(cfg.n * cfg.T, -1), y=ds.y, T=cfg.T, nu0=ds.nu,
                 mu_pos=ds.mu_pos, mu_neg=ds.mu_neg, **setup)  # fmt: skip
    return pb, ds


def _build_reduced(cfg: Config, ds: Dataset, streams: Streams, reason: str) -> Problem:
    """The reduced engine for a d-dimensional dataset (the user's, or generated for a test)."""
    n, T, d = ds.X.shape
    setup = _reduced_setup(cfg, ds.X, ds.mu_pos, ds.mu_neg, ds.nu, ds.W0, ds.p0, streams, generated=False)
    Q = setup["Q"]
    proj = lambda v: None if v is None else Q.T @ v
    X2 = setup.pop("tokens_Q")
    return Problem(
        engine="reduced", reason=reason, X2=X2, y=ds.y, T=T, nu0=Q.T @ ds.nu, mu_pos=proj(ds.mu_pos),
        mu_neg=proj(ds.mu_neg), **setup,
    )  # fmt: skip


def _start_W0(cfg: Config, streams: Streams, d: int) -> tuple:
    """Start drawing W(0) for :func:`_reduced_setup`: (the init stream before
    it, the running draw or None, the array it fills or a block buffer)."""
    replay = copy.deepcopy(streams.init)
    if keeps_w0(d):  # all of W(0), drawn once while Q is built
        buf = _w0_buffer(d)
        return replay, submit(fill_W0, cfg, streams.init, buf), buf
    return replay, None, np.empty((W0_block_rows(d), d))


def _reduced_setup(cfg: Config, X, mu_pos, mu_neg, nu, W0, p0, streams: Streams, generated: bool,
                   w0: tuple | None = None) -> dict:  # fmt: skip
    """Q, R, W~(0) = Q^T W(0) R, p~(0), the factor U of the part of W(0)R outside
    span(Q), and how to redraw W(0); ``tokens_Q``, X in Q coordinates (for the
    builder, not the :class:`Problem`). X (n, T, d): the tokens (generated: their noise).

    For generated data the signals lie on e1, e2, so Q is built from the tokens
    with those two coordinates zeroed plus e1 and e2: the same span as the
    tokens and signals, and bitwise the same basis for every signal strength
    (a cached setup then gives identical results whatever the run order).
    Otherwise Q spans the tokens, the signals given and nu. ``w0``: the draw
    of W(0) if :func:`_start_W0` already started it.

    Two passes over W(0) (given; drawn once into an array the process reuses
    when it takes at most ``KEEP_W0_BYTES``, its two halves at once by
    :func:`attnsim.data.fill_W0` while Q is built; otherwise drawn in row blocks and
    drawn again, memory O(d k + block)): M = W(0)^T Q, then the Gram matrix of
    W(0) R, both written with W(0) as the right-hand factor (Q^T W(0), R^T W(0)^T),
    which BLAS runs about 30% faster here than W(0)^T Q and W(0) R. With
    M = R T (R orthonormal, from :func:`orthonormal_basis`), W~(0) = M^T R = T^T
    (plus a zero column for the direction of p(0), orthogonal to span(M)), and
    H = (I - QQ^T) W(0) R has H^T H = (W(0) R)^T W(0) R - W~(0)^T W~(0). Each
    product runs as two fixed halves of rows on two threads (one BLAS thread
    each), summed in a fixed order: the result does not depend on the cores.
    """
    n, T, d = X.shape
    user_W0 = W0
    replay = single = None
    if W0 is None:
        replay, single, buf = w0 if w0 is not None else _start_W0(cfg, streams, d)
    X2 = X.reshape(n * T, d)
    if generated:
        A = np.zeros((d, n * T + 2))
        A[2:, : n * T] = X2[:, 2:].T
        A[0, n * T] = A[1, n * T + 1] = 1.0
        Q = orthonormal_basis(A)
    else:
        cols = [X2.T] + [m[:, None] for m in (mu_pos, mu_neg) if m is not None]
        Q = extend_basis(orthonormal_basis(np.concatenate(cols, axis=1)), nu)
    if single is not None:
        single.result()
        blocks = [(0, buf)]
    elif W0 is None:
        blocks = W0_blocks(cfg, streams.init, d, buf=buf)
    else:
        blocks = [(0, W0)]
    QT = np.ascontiguousarray(Q.T)
    MT = None  # M^T = Q^T W(0), k x d (as Q^T times row blocks: faster in BLAS than W(0)^T Q)
    for lo, block in blocks:
        part = _split_sum(lambda a, b, blk=block, lo=lo: QT[:, lo + a : lo + b] @ blk[a:b], block.shape[0])
        MT = part if MT is None else MT + part
    M = MT.T
    tokens_Q = submit(np.matmul, X2, Q)  # X Q on the second thread while this one builds R
    p0 = p0 if p0 is not None else draw_p0(cfg, streams.init, d)
    R, Tm = orthonormal_basis(M, with_factor=True)
    W0r = Tm.T  # = M^T R
    R2 = extend_basis(R, p0)
    if R2.shape[1] > R.shape[1]:  # the direction of p(0) is orthogonal to span(M): a zero column
        W0r = np.concatenate([W0r, np.zeros((W0r.shape[0], 1))], axis=1)
    R = R2
    if single is not None:
        blocks = [(0, buf)]
    elif W0 is None:
        blocks = W0_blocks(cfg, copy.deepcopy(replay), d, buf=buf)
    G = np.zeros((R.shape[1], R.shape[1]))
    RT = np.ascontiguousarray(R.T)
    for _, block in blocks:

        def gram(a, b, blk=block):
            NT = RT @ blk[a:b].T  # (W(0) R)^T of the rows a..b
            return NT @ NT.T

        G += _split_sum(gram, block.shape[0])
    return {
        "tokens_Q": tokens_Q.result(),  # (n T, k): the tokens (generated: their noise) in Q coordinates
        "W0": np.ascontiguousarray(W0r),
        "p0": R.T @ p0,
        "U_perp": psd_factor(G - W0r.T @ W0r),  # H^T H, H = (I - QQ^T) W(0) R
        "Q": Q,
        "R": R,
        "W0_source": (cfg, replay) if user_W0 is None else user_W0,
        "info": {"k": Q.shape[1], "r": R.shape[1]},
    }


_W0_BUFFER: list = [np.empty(0)]


def keeps_w0(d: int) -> bool:
    """Whether the reduced setup keeps all of a d x d W(0) (drawn once) rather
    than streaming it in row blocks (drawn twice)."""
    return 8.0 * d * d <= KEEP_W0_BYTES


def reserve_w0(d: int) -> float:
    """Allocate and touch the reused W(0) buffer for dimension d (when the
    reduced setup keeps W(0) whole) if the process has none that large yet;
    seconds spent. A fresh 32 MB buffer (d = 2000) costs its first setup
    10-25 ms of page faults, which later setups of the process never pay."""
    if not keeps_w0(d) or _W0_BUFFER[0].size >= d * d:
        return 0.0
    t = time.perf_counter()
    _w0_buffer(d).fill(0.0)
    return time.perf_counter() - t


def _w0_buffer(d: int) -> np.ndarray:
    """A d x d work array for W(0), reused by later setups of the process
    (a fresh one of 100+ MB costs its page faults on every setup)."""
    if _W0_BUFFER[0].size < d * d:
        _W0_BUFFER[0] = np.empty(d * d)
    return _W0_BUFFER[0][: d * d].reshape(d, d)


def _split_sum(fn, rows: int):
    """fn(0, h) + fn(h, rows), h = rows // 2 (a fixed split and order, two threads)."""
    if rows < 2:
        return fn(0, rows)
    first, second = halves(fn, rows)
    return first + second


def _attach_test(cfg: Config, ds: Dataset, streams: Streams, pb: Problem) -> None:
    """A user's X_test projected into engine coordinates, or a drawn test set."""
    if ds.X_test is not None:
        Xt = ds.X_test.reshape(-1, ds.X_test.shape[2])
        pb.y_test = ds.y_test
        if pb.engine == "dense":
            pb.X2_test = np.ascontiguousarray(Xt)
        else:  # X_test (I - QQ^T) W(0) R, written with the stored factors
            pb.X2_test = Xt @ pb.Q
            pb.O_test = Xt @ (pb.W0_full() @ pb.R - pb.Q @ pb.W0)
    elif cfg.test_n > 0 and ds.source == "generated":
        pb.X2_test, pb.O_test, pb.y_test = draw_test_set(
            cfg, streams.test, pb.k, pb.mu_pos, pb.mu_neg, pb.U_perp
        )
    pb.info["test_n"] = 0 if pb.y_test is None else int(pb.y_test.size)


def build_implicit(cfg: Config, streams: Streams, reason: str) -> tuple[Problem, Dataset]:
    """The implicit engine's problem and its (engine-coordinate) dataset; draw
    order in :func:`attnsim.data.draw_implicit_noise` and
    :func:`attnsim.data.draw_implicit_init`."""
    k = cfg.n * cfg.T + 2
    X = draw_implicit_noise(cfg, streams.data)
    mu_pos, mu_neg = signals(k, cfg.signal_norm)
    ds = assemble(cfg, X, *draw_labels(cfg, streams.data), mu_pos, mu_neg,
                  source="generated (implicit engine coordinates)")  # fmt: skip
    ds.X = None
    W0, U_perp = draw_implicit_init(cfg, streams.init, k)
    pb = Problem(engine="implicit", reason=reason, X2=np.ascontiguousarray(X.reshape(-1, k)), y=ds.y, T=cfg.T,
                 W0=W0, p0=np.zeros(k), nu0=ds.nu, mu_pos=mu_pos, mu_neg=mu_neg, U_perp=U_perp,
                 info={"k": k, "r": k})  # fmt: skip
    if cfg.test_n > 0:
        pb.X2_test, pb.O_test, pb.y_test = draw_test_set(cfg, streams.test, k, mu_pos, mu_neg, U_perp)
    pb.info["test_n"] = cfg.test_n
    return pb, ds
