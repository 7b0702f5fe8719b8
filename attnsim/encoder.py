"""The one-layer Transformer encoder as a model of attnsim (SPEC §12): its
parameters (PyTorch's initialization, or arrays from a data file), its
stepper for the driver and its evaluator on a finite test set.

The kernels are in :mod:`attnsim.kernels.encoder` (the CLS path with
hand-derived gradients); the readable reference that computes every position
is :func:`attnsim.model.encoder_forward`.
"""

from __future__ import annotations

import math

import numpy as np

from .config import Config, ConfigError
from .data import ENCODER_ARRAYS as PARAMS
from .data import DataError, Dataset, Streams, clean_labels, draw_tokens
from .data import encoder_shapes as param_shapes
from .kernels import DIVERGED, FROZEN, OK, Observation
from .kernels import encoder as K


def check_config(cfg: Config, user_data: bool = False) -> None:
    """Refuse the keys that cannot apply to the encoder, one line each (exit 2)."""
    defaults = Config()
    rules = (
        (
            cfg.engine in ("reduced", "implicit"),
            "engine",
            "the encoder runs in d dimensions (engine auto or dense)",
        ),
        (
            cfg.integrator != "gd",
            "integrator",
            "the encoder is trained by gradient descent only (integrator=gd)",
        ),
        (cfg.train != defaults.train, "train", "the encoder trains every parameter; leave train unset"),
        (cfg.limit, "limit", "the max-margin limit is defined for the attention model only"),
    )
    for bad, key, why in rules:
        if bad:
            raise ConfigError(f"{key}: {why}")
    for key in ("init_W", "init_W_scale", "init_p", "init_p_scale"):
        if getattr(cfg, key) != getattr(defaults, key):
            raise ConfigError(f"{key}: the encoder's weights use PyTorch's initialization; leave {key} unset")


def init_params(cfg: Config, rng: np.random.Generator, given: dict | None = None) -> dict[str, np.ndarray]:
    """PyTorch's default initialization, drawn from the run's init stream in
    the order of :data:`PARAMS`: Linear weights and biases U(-1/sqrt(fan_in),
    1/sqrt(fan_in)), LayerNorm gains 1 and biases 0, the CLS token
    N(0, init_cls_scale^2). Arrays in ``given`` replace the draws (the draws
    are made anyway, so the others do not depend on which are given)."""
    d, m = cfg.d, cfg.mlp_dim
    shapes = param_shapes(d, m)
    bound = {
        "W_qkv": 1 / math.sqrt(d),
        "W1": 1 / math.sqrt(d),
        "b1": 1 / math.sqrt(d),
        "W2": 1 / math.sqrt(m),
        "b2": 1 / math.sqrt(m),
        "head_w": 1 / math.sqrt(d),
        "head_b": 1 / math.sqrt(d),
    }
    P = {}
    for name in PARAMS:
        shape = shapes[name]
        if name == "cls":
            v = cfg.init_cls_scale * rng.standard_normal(shape)
        elif name in bound:
            v = rng.uniform(-bound[name], bound[name], shape)
        else:
            v = np.ones(shape) if name.endswith("_g") else np.zeros(shape)
        P[name] = v
    for name, v in (given or {}).items():
        if v.shape != shapes[name]:
            raise DataError(
                f"array {name!r} has shape {v.shape}, expected {shapes[name]} (d={d}, mlp_dim={m})"
            )
        P[name] = np.array(v, dtype=np.float64)
    return P


class EncoderStepper:
    """Gradient descent on every parameter of the encoder (a driver stepper)."""

    def __init__(self, X: np.ndarray, y: np.ndarray, P: dict, cfg: Config, rel: np.ndarray):
        n, T, d = X.shape
        self.n, self.T = n, T
        self.X2 = np.ascontiguousarray(X.reshape(n * T, d), dtype=np.float64)
        self.y = np.asarray(y, dtype=np.float64)
        self.P = {k: np.array(v, dtype=np.float64) for k, v in P.items()}
        self.lr, self.skip, self.loss = cfg.lr, cfg.skip, cfg.loss
        self.rel = np.asarray(rel, dtype=np.float64).reshape(n, T)
        self.fit_since = -np.ones(n, dtype=np.int64)
        self.S_acc = np.zeros(n)
        self._cache = None  # the forward pass of the current parameters

    def _forward(self) -> dict:
        if self._cache is None:
            self._cache = K.forward(self.X2, self.n, self.T, self.P, self.skip)
        return self._cache

    def advance(self, step0: int, nsteps: int) -> tuple[int, int]:
        for k in range(nsteps):
            step = step0 + k
            cache = self._forward()
            L, df = K.loss_coefficients(cache["f"], self.y, self.loss)
            if not np.isfinite(L):
                return DIVERGED, step
            fitted = self.y * cache["f"] > 0
            self.fit_since = np.where(fitted, np.where(self.fit_since < 0, step, self.fit_since), -1)
            self.S_acc += self.relevant_increments(cache["a"][:, 1:])
            G = K.backward(self.X2, self.n, self.T, self.P, self.skip, cache, df)
            if K.all_zero(G):
                return FROZEN, step
            K.update(self.P, G, self.lr)
            self._cache = None
        return OK, step0 + nsteps

    def observe(self) -> Observation:
        cache = self._forward()
        L, _ = K.loss_coefficients(cache["f"], self.y, self.loss)
        return Observation(cache["logits"][:, 1:], None, cache["a"][:, 1:], cache["f"], L)

    def state(self) -> dict[str, np.ndarray]:
        return self.P

    def extra_metrics(self) -> dict[str, float]:
        return {"score_cls": float(self._forward()["a"][:, 0].mean())}  # the CLS query's attention on itself

    def relevant_increments(self, s: np.ndarray) -> np.ndarray:
        sr = (s * self.rel).sum(axis=1)
        return sr * (1.0 - sr)

    def snapshot(self):
        return {k: v.copy() for k, v in self.P.items()}, self.fit_since.copy(), self.S_acc.copy()

    def restore(self, snap) -> None:
        P, fit, S = snap
        self.P = {k: v.copy() for k, v in P.items()}
        self.fit_since, self.S_acc = fit.copy(), S.copy()
        self._cache = None


class EncoderProblem:
    """The encoder's training and test sets and initial parameters."""

    engine = "dense"

    def __init__(self, cfg: Config, ds: Dataset, streams: Streams, reason: str):
        check_config(cfg)
        self.reason = reason
        self.ds = ds
        self.P0 = init_params(cfg, streams.init, ds.extra)
        self.T = ds.X.shape[1]
        if ds.X_test is not None:
            self.X_test, self.y_test = ds.X_test, ds.y_test
        elif cfg.test_n > 0 and ds.source == "generated":
            self.y_test = clean_labels(cfg.test_n)
            self.X_test, _ = draw_tokens(cfg, self.y_test, streams.test)
        else:
            self.X_test = self.y_test = None
        self.info = {
            "k": cfg.d,
            "mlp_dim": cfg.mlp_dim,
            "test_n": 0 if self.y_test is None else int(self.y_test.size),
        }

    def stepper(self, cfg: Config, rel: np.ndarray, y: np.ndarray | None = None) -> EncoderStepper:
        """GD on every parameter, trained on the labels ``y`` (default: the observed ones)."""
        return EncoderStepper(self.ds.X, self.ds.y if y is None else y, self.P0, cfg, rel)

    def evaluator(self, cfg: Config, pop=None):
        """Loss and accuracy on the finite test set (no closed form exists), in chunks."""
        if self.X_test is None:
            return None
        X, y = self.X_test, self.y_test
        m, T, d = X.shape

        def evaluate(P: dict) -> dict:
            total, right = 0.0, 0
            for lo in range(0, m, 1024):
                hi = min(m, lo + 1024)
                X2 = np.ascontiguousarray(X[lo:hi].reshape(-1, d))
                f = K.forward(X2, hi - lo, T, P, cfg.skip)["f"]
                L, _ = K.loss_coefficients(f, y[lo:hi], cfg.loss)
                total += L * (hi - lo)
                right += int(np.count_nonzero(y[lo:hi] * f > 0))
            return {"test_loss": total / m, "test_acc": right / m}

        return evaluate
