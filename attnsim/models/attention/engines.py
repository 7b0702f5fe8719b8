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
import dataclasses
import time
from typing import NamedTuple

import numpy as np

from ..._meta import FRESH_INTEGRATORS
from ...config import Config
from ...data.dataset import Dataset, Streams
from ...data.synthetic import assemble, data_keys, draw_labels, draw_noise, generate, signals
from ...init import W0_block_rows, W0_blocks, W0Init, draw_p0, draw_W0, fill_W0
from ...runtime.threads import halves, submit
from ...runtime.workspace import SETUP_CACHE_SIZE, Workspace
from .draws import draw_implicit_init, draw_implicit_noise, draw_test_set
from .linalg import extend_basis, orthonormal_basis, psd_factor
from .plan import keeps_w0, setup_key
from .problem import Problem


def build(
    cfg: Config, ds: Dataset | None, streams: Streams, engine: str, reason: str, ws: Workspace
) -> tuple[Problem, Dataset]:
    """Set up an engine for the user's dataset ``ds``, or for generated data
    (``ds`` None); returns the problem and the dataset (whose tokens live in
    the problem for the reduced and implicit engines). ``ws`` holds the
    process's reduced setups, W(0) buffer and kept draws."""
    if cfg.integrator in FRESH_INTEGRATORS:
        from .fresh_problem import build as build_fresh  # lazy: the fresh-sample integrators' modules

        return build_fresh(cfg, streams, engine, reason)
    if engine == "implicit":
        return build_implicit(cfg, streams, reason)
    if ds is None and engine == "reduced":
        pb, ds = _build_reduced_generated(cfg, streams, reason, ws)
    else:
        if ds is None:
            ds = generate(data_keys(cfg), streams)
        pb = (
            _build_dense(cfg, ds, streams, reason, ws)
            if engine == "dense"
            else _build_reduced(cfg, ds, streams, reason, ws)
        )
    _attach_test(cfg, ds, streams, pb)
    return pb, ds


def _flat(X: np.ndarray | None) -> np.ndarray | None:
    return None if X is None else np.ascontiguousarray(X.reshape(-1, X.shape[2]))


def _build_dense(cfg: Config, ds: Dataset, streams: Streams, reason: str, ws: Workspace) -> Problem:
    d = ds.X.shape[2]
    W0 = (
        ds.W0
        if ds.W0 is not None
        else draw_W0(W0Init(cfg.init_W, cfg.W_scale), streams.init, d, ws.kept_draws)
    )
    p0 = ds.p0 if ds.p0 is not None else draw_p0(cfg.init_p, cfg.p_scale, streams.init, d)
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


def _build_reduced_generated(
    cfg: Config, streams: Streams, reason: str, ws: Workspace
) -> tuple[Problem, Dataset]:
    """The reduced engine for generated data, its setup shared through the workspace's ``setups``.

    The token noise is kept in Q coordinates with the data stream's state
    after it, so a cached setup skips the noise draw and still draws the same
    labels; the signals are added in Q coordinates.
    """
    key = setup_key(cfg)
    cache = ws.setups
    if key in cache:
        cache.move_to_end(key)
        setup, noise_Q, after = cache[key]
    else:
        w0 = _start_W0(cfg, streams, cfg.d, ws)  # on the other threads while the noise is drawn
        noise = draw_noise(data_keys(cfg), streams.data)
        after = copy.deepcopy(streams.data)  # the labels come next from this stream
        setup = _reduced_setup(cfg, noise, Given(), streams, ws, generated=True, w0=w0)
        noise_Q = setup.pop("tokens_Q")
        cache[key] = (setup, noise_Q, after)
        while len(cache) > SETUP_CACHE_SIZE:
            cache.popitem(last=False)
    streams.data = copy.deepcopy(after)
    Q = setup["Q"]
    # the signals |mu| e1, |mu| e2 in Q coordinates: Q^T mu = |mu| times a row of Q (the same
    # numbers as the product, without reading all of Q)
    mu_pos = cfg.signal_norm * Q[0]
    mu_neg = -mu_pos if cfg.data_model == "magen2025" else cfg.signal_norm * Q[1]
    X = noise_Q.reshape(cfg.n, cfg.T, -1).copy()
    # the tokens (their means added in place by assemble) live in the problem, in Q coordinates
    dk = data_keys(cfg)
    ds = dataclasses.replace(assemble(dk, X, *draw_labels(dk, streams.data), mu_pos, mu_neg), X=None)
    pb = Problem(
        engine="reduced",
        reason=reason,
        X2=X.reshape(cfg.n * cfg.T, -1),
        y=ds.y,
        T=cfg.T,
        nu0=ds.nu,
        mu_pos=ds.mu_pos,
        mu_neg=ds.mu_neg,
        **setup,
    )
    return pb, ds


def _build_reduced(cfg: Config, ds: Dataset, streams: Streams, reason: str, ws: Workspace) -> Problem:
    """The reduced engine for a d-dimensional dataset (the user's, or generated for a test)."""
    n, T, d = ds.X.shape
    given = Given(ds.mu_pos, ds.mu_neg, ds.nu, ds.W0, ds.p0)
    setup = _reduced_setup(cfg, ds.X, given, streams, ws, generated=False)
    Q = setup["Q"]
    proj = lambda v: None if v is None else Q.T @ v
    X2 = setup.pop("tokens_Q")
    return Problem(
        engine="reduced",
        reason=reason,
        X2=X2,
        y=ds.y,
        T=T,
        nu0=Q.T @ ds.nu,
        mu_pos=proj(ds.mu_pos),
        mu_neg=proj(ds.mu_neg),
        **setup,
    )


def _start_W0(cfg: Config, streams: Streams, d: int, ws: Workspace) -> tuple:
    """Start drawing W(0) for :func:`_reduced_setup`: (the init stream before
    it, the running draw or None, the array it fills or a block buffer)."""
    replay = copy.deepcopy(streams.init)
    if cfg.init_W == "identity":  # nothing to draw: the setup needs no pass over W(0) = I
        return replay, None, None
    if keeps_w0(d):  # all of W(0), drawn once while Q is built
        buf = _w0_buffer(d, ws)
        return replay, submit(fill_W0, W0Init(cfg.init_W, cfg.W_scale), streams.init, buf, ws.kept_draws), buf
    return replay, None, np.empty((W0_block_rows(d), d))


class Given(NamedTuple):
    """What a data file gives beside its tokens (None: not given; generated data gives none:
    its signals lie on e1, e2 and its W(0), p(0) are drawn)."""

    mu_pos: np.ndarray | None = None
    mu_neg: np.ndarray | None = None
    nu: np.ndarray | None = None
    W0: np.ndarray | None = None
    p0: np.ndarray | None = None


def _reduced_setup(
    cfg: Config,
    X,
    given: Given,
    streams: Streams,
    ws: Workspace,
    generated: bool,
    w0: tuple | None = None,
) -> dict:
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
    :func:`attnsim.init.fill_W0` while Q is built; otherwise drawn in row blocks and
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
    mu_pos, mu_neg, nu, W0, p0 = given
    user_W0 = W0
    replay = single = None
    if W0 is None:
        replay, single, buf = w0 if w0 is not None else _start_W0(cfg, streams, d, ws)
    X2 = X.reshape(n * T, d)
    identity = W0 is None and cfg.init_W == "identity"  # M = Q, (W(0) R)^T W(0) R = I: no pass over W(0)
    if generated:
        A = np.zeros((d, n * T + 2))
        A[2:, : n * T] = X2[:, 2:].T
        A[0, n * T] = A[1, n * T + 1] = 1.0
        Q, factor = orthonormal_basis(A, with_factor=True)
        if identity and p0 is None and cfg.init_p == "zeros":
            return _identity_setup(Q, generated_coordinates(X2, Q, factor), replay, cfg.W_scale)
    else:
        cols = [X2.T] + [m[:, None] for m in (mu_pos, mu_neg) if m is not None]
        Q = extend_basis(orthonormal_basis(np.concatenate(cols, axis=1)), nu)
    if identity:
        blocks = []
    elif single is not None:
        single.result()
        blocks = [(0, buf)]
    elif W0 is None:
        blocks = W0_blocks(W0Init(cfg.init_W, cfg.W_scale), streams.init, d, buf=buf)
    else:
        blocks = [(0, W0)]
    QT = np.ascontiguousarray(Q.T)
    MT = QT if identity else None  # M^T = Q^T W(0), k x d (Q^T times row blocks: faster than W(0)^T Q)
    for lo, block in blocks:
        part = _split_sum(lambda a, b, blk=block, lo=lo: QT[:, lo + a : lo + b] @ blk[a:b], block.shape[0])
        MT = part if MT is None else MT + part
    M = MT.T
    tokens_Q = submit(np.matmul, X2, Q)  # X Q on the second thread while this one builds R
    p0 = p0 if p0 is not None else draw_p0(cfg.init_p, cfg.p_scale, streams.init, d)
    R, Tm = orthonormal_basis(M, with_factor=True)
    W0r = Tm.T  # = M^T R
    R2 = extend_basis(R, p0)
    if R2.shape[1] > R.shape[1]:  # the direction of p(0) is orthogonal to span(M): a zero column
        W0r = np.concatenate([W0r, np.zeros((W0r.shape[0], 1))], axis=1)
    R = R2
    if single is not None:
        blocks = [(0, buf)]
    elif W0 is None and not identity:
        blocks = W0_blocks(W0Init(cfg.init_W, cfg.W_scale), copy.deepcopy(replay), d, buf=buf)
    G = np.eye(R.shape[1]) if identity else np.zeros((R.shape[1], R.shape[1]))
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
        "W0_source": (W0Init(cfg.init_W, cfg.W_scale), replay) if user_W0 is None else user_W0,
        "info": {"k": Q.shape[1], "r": R.shape[1]},
    }


def generated_coordinates(X2: np.ndarray, Q: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """X2 Q for generated tokens X2 (n*T, d) without a d-sized product, from the basis Q of
    :func:`_reduced_setup`'s A (the tokens with their first two coordinates zeroed, then e1,
    e2) and its factor A = Q T: the zeroed tokens are A's first n*T columns, Q T[:, :n*T], so
    their coordinates are T[:, :n*T]^T (Q^T Q = I to the 1e-13 the basis is checked to), and
    the first two coordinates add X2[:, :2] Q[:2]. O(n*T k) instead of X2 @ Q's d k n*T."""
    m = X2.shape[0]
    return np.ascontiguousarray(factor[:, :m].T + X2[:, :2] @ Q[:2])


def _identity_setup(Q: np.ndarray, tokens_Q: np.ndarray, replay, scale: float) -> dict:
    """The reduced setup for W(0) = I and p(0) = 0: W(0) R = Q lies in span(Q), so R = Q,
    W~(0) = Q^T Q = I (to the rounding of Q's orthonormality) and nothing of q lies outside
    span(Q) (U_perp None), with no d x d pass and no second basis."""
    k = Q.shape[1]
    return {
        "tokens_Q": tokens_Q,
        "W0": np.eye(k),
        "p0": np.zeros(k),
        "U_perp": None,
        "Q": Q,
        "R": Q,
        "W0_source": (W0Init("identity", scale), replay),
        "info": {"k": k, "r": k},
    }


def reserve_w0(d: int, ws: Workspace) -> float:
    """Allocate and touch the reused W(0) buffer for dimension d (when the
    reduced setup keeps W(0) whole) if the process has none that large yet;
    seconds spent. A fresh 32 MB buffer (d = 2000) costs its first setup
    10-25 ms of page faults, which later setups of the process never pay."""
    if not keeps_w0(d) or ws.w0.size >= d * d:
        return 0.0
    t = time.perf_counter()
    _w0_buffer(d, ws).fill(0.0)
    return time.perf_counter() - t


def _w0_buffer(d: int, ws: Workspace) -> np.ndarray:
    """A d x d work array for W(0), reused by later setups of the process
    (a fresh one of 100+ MB costs its page faults on every setup)."""
    if ws.w0.size < d * d:
        ws.w0 = np.empty(d * d)
    return ws.w0[: d * d].reshape(d, d)


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
            data_keys(cfg), streams.test, pb.k, pb.mu_pos, pb.mu_neg, pb.U_perp
        )
    pb.info["test_n"] = 0 if pb.y_test is None else int(pb.y_test.size)


def build_implicit(cfg: Config, streams: Streams, reason: str) -> tuple[Problem, Dataset]:
    """The implicit engine's problem and its (engine-coordinate) dataset; draw
    order in :func:`attnsim.models.attention.draws.draw_implicit_noise` and
    :func:`attnsim.data.draw_implicit_init`."""
    k = cfg.n * cfg.T + 2
    X = draw_implicit_noise(data_keys(cfg), streams.data)
    mu_pos, mu_neg = signals(k, cfg.signal_norm)
    ds = dataclasses.replace(
        assemble(
            data_keys(cfg),
            X,
            *draw_labels(data_keys(cfg), streams.data),
            mu_pos,
            mu_neg,
            source="generated (implicit engine coordinates)",
        ),
        X=None,
    )
    W0, U_perp = draw_implicit_init(cfg.W_scale, cfg.d, streams.init, k)
    pb = Problem(
        engine="implicit",
        reason=reason,
        X2=np.ascontiguousarray(X.reshape(-1, k)),
        y=ds.y,
        T=cfg.T,
        W0=W0,
        p0=np.zeros(k),
        nu0=ds.nu,
        mu_pos=mu_pos,
        mu_neg=mu_neg,
        U_perp=U_perp,
        info={"k": k, "r": k},
    )
    if cfg.test_n > 0:
        pb.X2_test, pb.O_test, pb.y_test = draw_test_set(
            data_keys(cfg), streams.test, k, mu_pos, mu_neg, U_perp
        )
    pb.info["test_n"] = cfg.test_n
    return pb, ds
