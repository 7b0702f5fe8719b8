"""The one-layer Transformer encoder as a model of attnsim (SPEC §12): its
parameters (PyTorch's initialization, or arrays from a data file), its
stepper for the driver and its evaluator on a finite test set.

The kernels are in :mod:`.kernels` (the CLS path with
hand-derived gradients); the readable reference that computes every position
is :func:`.reference.encoder_forward`.
"""

from __future__ import annotations

import copy

import numpy as np

from ... import registry
from ...config import Config
from ...data.dataset import Dataset, Streams
from ...data.synthetic import clean_labels, data_keys, draw_tokens
from ...optimizers.base import Optimizer
from ...runtime.threads import Done, blas, threads
from ...runtime.workspace import PROCESS
from ..base import ClassifierStepper, Observation, Outcome
from . import linalg
from . import passes as K
from .kernels import normalized_tokens
from .params import init_params


class EncoderStepper(ClassifierStepper):
    """Gradient descent on every parameter of the encoder (a driver stepper).

    ``optimizer``: "gd" (the official loop's SGD, its d x d updates applied in place
    from their factors), or a plug-in :class:`attnsim.optimizers.base.Optimizer` that updates
    every parameter tensor by its gradient array (:func:`.linalg.dense_grads`): normalized GD
    (W_qkv one tensor as torch's to_qkv.weight), AdamW over model.parameters() as one group,
    every tensor decaying, ... ``own``: P's arrays are the stepper's to train in place (else
    it trains a copy)."""

    def __init__(
        self,
        X: np.ndarray,
        y: np.ndarray,
        P: dict,
        lr: float,
        skip: bool,
        loss: str,
        rel: np.ndarray,
        optimizer: str | Optimizer = "gd",
        own: bool = False,
    ):
        if not (optimizer == "gd" or isinstance(optimizer, Optimizer)):
            raise ValueError(f"optimizer: {optimizer!r} ('gd' or a plug-in Optimizer)")
        self.opt = None if optimizer == "gd" else optimizer
        n, T, d = X.shape
        self.n, self.T = n, T
        self.X2 = np.ascontiguousarray(X.reshape(n * T, d), dtype=np.float64)
        self.y = np.asarray(y, dtype=np.float64)
        # own: P's arrays are the stepper's to train in place (else it trains a copy)
        self.P = {k: (np.ascontiguousarray if own else np.array)(v, dtype=np.float64) for k, v in P.items()}
        self.lr, self.skip, self.loss = lr, skip, loss
        self._init_records(n, rel, T)
        if self.opt is not None:
            self.opt.start(self.P)
        self.nx = normalized_tokens(self.X2)  # LN1 of the data without gain and bias: fixed
        self.work = K.work_arrays(n, T, d, self.P["b1"].size)  # every step's arrays, made once
        self._cache = None  # the forward pass of the current parameters
        self.held = linalg.Held(d)  # the updates of W_q and W_k not yet in P
        # both cores in a step's BLAS products (OpenBLAS keeps small ones on one);
        # one in a sweep's worker, which shares the machine with another
        self.blas_threads = threads()

    def _forward(self) -> dict:
        if self._cache is None:
            self._cache = K.forward(self.X2, self.n, self.T, self.P, self.skip, self.nx, self.held, self.work)
        return self._cache

    def _advance(self, step0: int, nsteps: int) -> tuple[Outcome, int]:
        if self.blas_threads == 1:
            return self._steps(step0, nsteps)
        with blas().limit(limits=self.blas_threads, user_api="blas"):
            return self._steps(step0, nsteps)

    def _steps(self, step0: int, nsteps: int) -> tuple[Outcome, int]:
        for k in range(nsteps):
            step = step0 + k
            cache = self._forward()
            L, df = K.loss_coefficients(cache["f"], self.y, self.loss)
            if not np.isfinite(L):
                return Outcome.DIVERGED, step
            fitted = self.y * cache["f"] > 0
            self.fit_since = np.where(fitted, np.where(self.fit_since < 0, step, self.fit_since), -1)
            self.S_acc += self.relevant_increments(cache["a"][:, 1:])
            if self.opt is None:
                G = K.backward(self.X2, self.n, self.T, self.P, self.skip, cache, df, self.lr, self.held)
            else:
                G = K.backward(self.X2, self.n, self.T, self.P, self.skip, cache, df)
                self.opt.update(self.P, linalg.dense_grads(G), step + 1)  # t as torch counts updates
            self._cache = None
            # the step just taken changed nothing (AdamW's moments move a state of zero gradient)
            if (self.opt is None or self.opt.rests_at_zero) and linalg.all_zero(G):
                return Outcome.FROZEN, step
        return Outcome.FINISHED, step0 + nsteps

    def observe(self) -> Observation:
        cache = self._forward()
        L, _ = K.loss_coefficients(cache["f"], self.y, self.loss)
        # copies: the next step's pass writes into the cache's arrays
        return Observation(
            cache["logits"][:, 1:].copy(), None, cache["a"][:, 1:].copy(), cache["f"].copy(), L
        )

    def state(self) -> dict[str, np.ndarray]:
        self.held.apply(self.P["W_qkv"])
        return self.P

    def extra_metrics(self) -> dict[str, float]:
        return {"score_cls": float(self._forward()["a"][:, 0].mean())}  # the CLS query's attention on itself

    def _snapshot_extra(self) -> object:
        return None if self.opt is None else self.opt.snapshot()

    def _restore_extra(self, extra: object) -> None:
        if self.opt is not None:
            self.opt.restore(extra)

    def _restore_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.P = {k: v.copy() for k, v in arrays.items()}
        self.held = linalg.Held(self.X2.shape[1])  # the snapshot holds every update
        self._cache = None


class EncoderProblem:
    """The encoder's training and test sets and initial parameters (:attr:`P0`; the first
    stepper takes those very arrays and trains them in place, so each later reader of P0
    gets them drawn again from the same stream: a copy of the default encoder's 160 MB of
    parameters took as long as drawing them)."""

    engine = "dense"

    def __init__(self, cfg: Config, ds: Dataset, streams: Streams, reason: str):
        self.reason = reason
        self.ds = ds
        self._draw = (cfg, copy.deepcopy(streams.init), ds.extra)  # to draw P(0) again
        self._P0: dict | None = init_params(cfg, streams.init, ds.extra)
        self.T = ds.X.shape[1]
        if ds.X_test is not None:
            self.X_test, self.y_test = ds.X_test, ds.y_test
        elif cfg.test_n > 0 and ds.source == "generated":
            self.y_test = clean_labels(cfg.test_n)
            self.X_test, _ = draw_tokens(data_keys(cfg), self.y_test, streams.test)
        else:
            self.X_test = self.y_test = None
        self._test_nx: dict[int, np.ndarray] = {}  # the test set's normalized tokens, by chunk
        self.info = {
            "k": cfg.d,
            "mlp_dim": cfg.mlp_dim,
            "test_n": 0 if self.y_test is None else int(self.y_test.size),
        }

    @property
    def P0(self) -> dict:
        """The initial parameters (drawn again if a stepper has taken them)."""
        if self._P0 is None:
            cfg, rng, extra = self._draw
            return init_params(cfg, copy.deepcopy(rng), extra)
        return self._P0

    def stepper(self, cfg: Config, rel: np.ndarray, y: np.ndarray | None = None) -> EncoderStepper:
        """GD (fused) or a plug-in optimizer on every parameter, trained on the labels ``y``
        (default: the observed ones); the first stepper trains P0's own arrays."""
        P, self._P0 = self.P0, None
        return EncoderStepper(
            self.ds.X,
            self.ds.y if y is None else y,
            P,
            cfg.lr,
            cfg.skip,
            cfg.loss,
            rel,
            optimizer="gd" if cfg.optimizer == "gd" else registry.make_optimizer(cfg),
            own=True,
        )

    def objective(self, cfg: Config, state: dict, y: np.ndarray) -> float:
        """The mean training loss of the parameters ``state`` by the all-positions reference."""
        from .reference import encoder_loss  # lazy: check-grad alone reads the reference

        return encoder_loss(self.ds.X, y, state, cfg.skip, cfg.loss)

    def evaluator(self, cfg: Config, pop: None = None) -> TestSetEvaluator | None:
        """Loss and accuracy on the finite test set (no closed form exists)."""
        if self.X_test is None:
            return None
        return TestSetEvaluator(self.X_test, self.y_test, cfg.skip, cfg.loss, self._test_nx)


CHUNK = 1024  # test samples per forward pass
KEEP_NX_BYTES = 256 * 2**20  # the test set's normalized tokens kept between evaluations up to this size
KEEP_WORK_BYTES = 128 * 2**20  # a chunk's work arrays kept between evaluations up to about this size


class TestSetEvaluator:
    """Loss and accuracy of encoder parameters on a finite test set, in chunks
    (an :class:`attnsim.models.base.Evaluator`; :meth:`defer` computes at once).
    The normalized test tokens depend on the data alone: they are computed once and
    kept in ``nx`` (shared by the run's evaluators and its twin's) when the test set's
    tokens fit in :data:`KEEP_NX_BYTES`; the pass's work arrays are kept between calls
    when they are small (fresh ones fault in their pages at every evaluation)."""

    def __init__(self, X: np.ndarray, y: np.ndarray, skip: bool, loss: str, nx: dict | None = None):
        self.X, self.y, self.skip, self.loss = X, y, skip, loss
        self._nx = nx if nx is not None and X.nbytes <= KEEP_NX_BYTES else None
        self._work: dict[int, dict] = {}

    def __call__(self, P: dict) -> dict:
        n = threads()  # both cores, as the steps' products (nothing else runs meanwhile)
        with PROCESS.evaluating():
            if n == 1:
                return self._measure(P)
            with blas().limit(limits=n, user_api="blas"):
                return self._measure(P)

    def _measure(self, P: dict) -> dict:
        X, y = self.X, self.y
        m, T, d = X.shape
        total, right = 0.0, 0
        for lo in range(0, m, CHUNK):
            hi = min(m, lo + CHUNK)
            X2 = np.ascontiguousarray(X[lo:hi].reshape(-1, d))
            nx = None if self._nx is None else self._nx.get(lo)
            if nx is None:
                nx = normalized_tokens(X2)
                if self._nx is not None:
                    self._nx[lo] = nx
            f = K.forward(X2, hi - lo, T, P, self.skip, nx=nx, work=self._work_for(hi - lo, T, d, P))["f"]
            L, _ = K.loss_coefficients(f, y[lo:hi], self.loss)
            total += L * (hi - lo)
            right += int(np.count_nonzero(y[lo:hi] * f > 0))
        return {"test_loss": total / m, "test_acc": right / m}

    def _work_for(self, n: int, T: int, d: int, P: dict) -> dict | None:
        if n not in self._work:
            m = P["b1"].size
            if 8 * n * (18 * d + 3 * m) > KEEP_WORK_BYTES:  # work_arrays' n-row arrays
                return None
            self._work[n] = K.work_arrays(n, T, d, m)
        return self._work[n]

    def defer(self, P: dict) -> Done:
        with np.errstate(over="ignore", invalid="ignore"):
            return Done(self(P))
