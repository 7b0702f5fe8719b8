"""Real data: the paper's fine-tuning protocol (its Table 2) on any token
features, and a real dataset that ships offline (SPEC §14).

The protocol, for token features X (N, T, d) and binary labels (N,):

1. Split (seeded by the run's data stream): a clean *pre-training* set, a
   clean *test* set and a training *pool*.
2. Phase 1: fit the head nu on the pre-training set with attention at its
   initial state. With p(0) = 0 attention is uniform, so the model's output is
   the mean-pooled token dotted with nu: logistic regression on the mean
   tokens, without intercept (the model has none), with an L2 penalty
   ``HEAD_L2`` |nu|^2 / 2 (the regularization), by L-BFGS. The head is then
   frozen (the paper re-initializes the last layer's query and key and keeps
   the pre-trained head).
3. Phase 2: n training samples from the pool, a fraction eta of their labels
   flipped (symmetric noise: round(n eta) samples chosen at random), and W and
   p trained from their initial state as in every attnsim run. Test metrics
   on the clean test set; the head-only baseline is the test accuracy at
   step 0 (uniform attention).

The built-in dataset is scikit-learn's handwritten digits (``--data digits``,
optional extra ``pip install 'attnsim[real]'``; the 1,797 8 x 8 images are in
the scikit-learn wheel, nothing is downloaded): each image becomes T = 16
tokens, one per 2 x 2 patch (its 4 pixel values / 16 and a one-hot position),
embedded into d dimensions by a fixed random feature map ReLU(A z + b) (A
Gaussian with variance 2 / 20, b uniform on [0, 1), drawn once with seed
``FEATURE_SEED``; then centred on the mean token of the whole dataset and
scaled to unit mean squared norm per coordinate). The feature map is a stand-in
for a frozen pre-trained backbone; the binary task is digits 0-4 against 5-9
(the paper used 10 classes and pre-trained ViT and BERT).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .config import Config, ConfigError
from .data import DataError, Dataset

HEAD_L2 = 1e-2
FEATURE_SEED = 20240917  # the digits feature map: fixed, the same for every run
DIGITS_PRETRAIN, DIGITS_TEST = 400, 400
PATCH = 2


def load_digits_tokens(d: int) -> tuple[np.ndarray, np.ndarray]:
    """The digits as tokens (1797, 16, d) and labels (+1: digits 0-4, -1: 5-9)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise DataError("--data digits: needs scikit-learn; pip install 'attnsim[real]'") from None
    digits = load_digits()
    images, target = digits.images / 16.0, digits.target
    N, side = images.shape[0], images.shape[1]
    per = side // PATCH
    patches = (
        images.reshape(N, per, PATCH, per, PATCH)
        .transpose(0, 1, 3, 2, 4)
        .reshape(N, per * per, PATCH * PATCH)
    )
    T = per * per
    raw = np.concatenate([patches, np.broadcast_to(np.eye(T), (N, T, T))], axis=2)  # pixels and position
    return feature_map(raw, d), np.where(target <= 4, 1.0, -1.0)


def feature_map(raw: np.ndarray, d: int) -> np.ndarray:
    """ReLU random features of raw tokens (N, T, r) -> (N, T, d), centred and scaled (module docstring)."""
    rng = np.random.default_rng(FEATURE_SEED)
    r = raw.shape[2]
    A = rng.standard_normal((r, d)) * math.sqrt(2.0 / r)
    b = rng.random(d)
    X = np.maximum(raw @ A + b, 0.0)
    X -= X.reshape(-1, d).mean(axis=0)
    X /= math.sqrt(np.mean(X**2))
    return X


@dataclass
class Split:
    pretrain: np.ndarray
    test: np.ndarray
    pool: np.ndarray


def split(N: int, n_pretrain: int, n_test: int, rng: np.random.Generator) -> Split:
    """A random split of N samples into pre-training, test and the rest (the pool)."""
    if n_pretrain + n_test >= N:
        raise DataError(
            f"real data: {N} samples cannot give {n_pretrain} pre-training and {n_test} test ones"
        )
    perm = rng.permutation(N)
    return Split(perm[:n_pretrain], perm[n_pretrain : n_pretrain + n_test], perm[n_pretrain + n_test :])


def fit_head(X: np.ndarray, y: np.ndarray, l2: float = HEAD_L2) -> np.ndarray:
    """Phase 1: the head nu minimizing mean log(1 + exp(-y xbar . nu)) + l2 |nu|^2 / 2,
    xbar the mean token of each sample (uniform attention), by L-BFGS."""
    from scipy.optimize import minimize

    xbar = X.mean(axis=1)

    def objective(nu):
        m = y * (xbar @ nu)
        loss = np.mean(np.logaddexp(0.0, -m)) + 0.5 * l2 * nu @ nu
        sig = np.exp(-np.logaddexp(0.0, m))  # sigma(-m)
        grad = -(xbar.T @ (y * sig)) / y.size + l2 * nu
        return loss, grad

    res = minimize(objective, np.zeros(X.shape[2]), jac=True, method="L-BFGS-B", options={"maxiter": 2000})
    return res.x


def flip(y: np.ndarray, eta: float, rng: np.random.Generator) -> np.ndarray:
    """Symmetric label noise: round(n eta) labels, chosen at random, flipped."""
    y = y.copy()
    k = int(math.floor(y.size * eta + 0.5))
    idx = rng.choice(y.size, size=k, replace=False)
    y[idx] = -y[idx]
    return y


def protocol_dataset(X: np.ndarray, labels: np.ndarray, cfg: Config, rng: np.random.Generator, source: str,
                     n_pretrain: int = DIGITS_PRETRAIN, n_test: int = DIGITS_TEST) -> Dataset:  # fmt: skip
    """Phase 1 and the training set of phase 2 for one run: n = cfg.n training
    samples from the pool with cfg.noise_rate of their labels flipped, the
    fitted head and the clean test split (``rng``: the run's data stream)."""
    parts = split(X.shape[0], n_pretrain, n_test, rng)
    if cfg.n > parts.pool.size:
        raise ConfigError(f"n: the {source} pool has {parts.pool.size} samples, got n={cfg.n}")
    nu = fit_head(X[parts.pretrain], labels[parts.pretrain])
    train = rng.choice(parts.pool, size=cfg.n, replace=False)
    y_clean = labels[train]
    y = flip(y_clean, cfg.noise_rate, rng)
    return Dataset(X=X[train], y=y, y_clean=y_clean, roles=None, mu_pos=None, mu_neg=None, sigma=None, nu=nu,
                   X_test=X[parts.test], y_test=labels[parts.test], source=source)  # fmt: skip


BUILTIN = {"digits": load_digits_tokens}


def builtin_dataset(name: str, cfg: Config, rng: np.random.Generator) -> Dataset:
    """``--data NAME`` for a built-in dataset: one run of the protocol."""
    X, labels = BUILTIN[name](cfg.d)
    return protocol_dataset(X, labels, cfg, rng, source=f"{name} (real data, attnsim.realdata)")
