"""Real data: token features run through the paper's fine-tuning protocol (its
Table 2), and a real dataset that ships offline (SPEC §14). The protocol's table
is :mod:`attnsim.experiments.real`.

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
   flipped (symmetric noise: round(n eta) samples chosen at random; with
   ``label_noise = iid`` each label independently with probability eta), and
   W and p trained from their initial state as in every attnsim run. Test metrics
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

import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import Config, ConfigError
from ..runtime.resources import format_bytes, physical_memory
from .dataset import DataError, Dataset
from .files import ArrayChecks, load_npz, read_npz

HEAD_L2 = 1e-2
FEATURE_SEED = 20240917  # the digits feature map: fixed, the same for every run
DIGITS_PRETRAIN, DIGITS_TEST = 400, 400
DIGITS_N, DIGITS_T = 1797, 16  # images, and tokens per image (4 x 4 patches of 2 x 2 pixels)
PATCH = 2


def require_sklearn(what: str = "--data digits") -> None:
    """Refuse, with the install command, when the optional scikit-learn is missing."""
    if importlib.util.find_spec("sklearn") is None:
        raise DataError(f"{what}: needs scikit-learn; pip install 'attnsim[real]'")


def load_digits_tokens(d: int) -> tuple[np.ndarray, np.ndarray]:
    """The digits as tokens (1797, 16, d) and labels (+1: digits 0-4, -1: 5-9)."""
    require_sklearn()
    from sklearn.datasets import load_digits  # optional dependency (the real extra)

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
    from scipy.optimize import minimize  # lazy: start-up of every run that is not on real data

    xbar = X.mean(axis=1)

    def objective(nu):
        m = y * (xbar @ nu)
        loss = np.mean(np.logaddexp(0.0, -m)) + 0.5 * l2 * nu @ nu
        sig = np.exp(-np.logaddexp(0.0, m))  # sigma(-m)
        grad = -(xbar.T @ (y * sig)) / y.size + l2 * nu
        return loss, grad

    opts = {"maxiter": 10_000, "gtol": 1e-10, "ftol": 1e-15}
    res = minimize(objective, np.zeros(X.shape[2]), jac=True, method="L-BFGS-B", options=opts)
    if np.max(np.abs(res.jac)) > 1e-6:
        raise DataError(f"real data: the head's logistic regression did not converge ({res.message})")
    return res.x


def flip(y: np.ndarray, eta: float, rng: np.random.Generator, iid: bool = False) -> np.ndarray:
    """Symmetric label noise: round(n eta) labels, chosen at random, flipped;
    with ``iid`` each label flipped independently with probability eta (the
    official code's noise model, there over K classes)."""
    y = y.copy()
    if iid:
        idx = np.flatnonzero(rng.random(y.size) < eta)
    else:
        k = int(math.floor(y.size * eta + 0.5))
        idx = rng.choice(y.size, size=k, replace=False)
    y[idx] = -y[idx]
    return y


def protocol_dataset(
    X: np.ndarray,
    labels: np.ndarray,
    cfg: Config,
    rng: np.random.Generator,
    source: str,
    n_pretrain: int = DIGITS_PRETRAIN,
    n_test: int = DIGITS_TEST,
) -> Dataset:
    """Phase 1 and the training set of phase 2 for one run: n = cfg.n training
    samples from the pool with cfg.noise_rate of their labels flipped, the
    fitted head and the clean test split (``rng``: the run's data stream)."""
    parts = split(X.shape[0], n_pretrain, n_test, rng)
    if cfg.n > parts.pool.size:
        raise ConfigError(f"n: the {source} pool has {parts.pool.size} samples, got n={cfg.n}")
    nu = fit_head(X[parts.pretrain], labels[parts.pretrain])
    train = rng.choice(parts.pool, size=cfg.n, replace=False)
    y_clean = labels[train]
    y = flip(y_clean, cfg.noise_rate, rng, iid=cfg.label_noise == "iid")
    return Dataset(
        X=X[train],
        y=y,
        y_clean=y_clean,
        roles=None,
        mu_pos=None,
        mu_neg=None,
        sigma=None,
        nu=nu,
        X_test=X[parts.test],
        y_test=labels[parts.test],
        source=source,
    )


BUILTIN = {"digits": load_digits_tokens}


@dataclass
class Source:
    """Token features and labels for the protocol: a built-in dataset (its
    features depend on the config's d) or a features file (d is the file's)."""

    name: str
    load: Callable[[int], tuple[np.ndarray, np.ndarray]]  # d -> (X (N, T, d), labels (N,))
    n_pretrain: int = DIGITS_PRETRAIN
    n_test: int = DIGITS_TEST
    builtin: bool = False
    shape: tuple[int, int, int | None] = (DIGITS_N, DIGITS_T, None)  # (N, T, d); d None: the config's

    def decided_keys(self) -> dict[str, str]:
        """The config keys the source decides (a sweep or ``real --set`` refuses them)."""
        what = "the features file" if not self.builtin else f"the built-in dataset {self.name.split()[0]}"
        keys = {"T": what, "test_n": f"{what} (its clean test split)"}
        if not self.builtin:
            keys["d"] = what
        return keys

    def run_keys(self) -> set[str]:
        """The keys a run of the protocol takes from this source, not the user (the pool
        size n and the label noise it draws; d too for the built-in features)."""
        return {"n", "noise_rate", "label_noise"} | ({"d"} if self.builtin else set())

    def check_memory(self, d: int) -> None:
        """Refuse, before the features are built, a d whose features cannot fit in memory
        (a built-in dataset's feature map holds about three (N, T, d) float arrays)."""
        if not self.builtin:
            return  # the file's arrays were checked against memory when it was read
        N, T, _ = self.shape
        need = 3 * 8.0 * N * T * d
        have = physical_memory()
        if need > 0.5 * have:
            raise ConfigError(
                f"d: the {self.name.split()[0]} features in d={d} dimensions need about "
                f"{format_bytes(need)} of memory ({N} x {T} x d floats, three copies while the feature map "
                f"runs); this machine has {format_bytes(have)}"
            )

    def dataset(self, cfg: Config, rng: np.random.Generator) -> Dataset:
        """One run of the protocol (``rng``: the run's data stream)."""
        X, labels = self.load(cfg.d)
        return protocol_dataset(X, labels, cfg, rng, self.name, self.n_pretrain, self.n_test)

    def pool_size(self) -> int:
        return self.shape[0] - self.n_pretrain - self.n_test


def features_source(path: Path, arrays: dict[str, np.ndarray]) -> Source:
    """A features file: arrays ``features`` (N, T, d) and ``labels`` (N,) of
    -1/+1, optional scalars ``n_pretrain`` and ``n_test`` (default 400 each)."""
    v = ArrayChecks(path, arrays)
    if "labels" not in arrays:
        v.fail("a features file needs arrays 'features' (N, T, d) and 'labels' (N,)")
    X = v.numeric("features", (None, None, None))
    v.magnitudes(X.shape[2])
    labels = v.labels("labels", X.shape[0])
    sizes = []
    for key, default in (("n_pretrain", DIGITS_PRETRAIN), ("n_test", DIGITS_TEST)):
        value = v.scalar(key, positive=True)
        if value is not None and not float(value).is_integer():
            v.fail(f"array {key!r} must be a whole number, got {value}")
        sizes.append(default if value is None else int(value))
    unknown = sorted(set(arrays) - {"features", "labels", "n_pretrain", "n_test"})
    if unknown:
        v.fail(f"a features file holds only features, labels, n_pretrain and n_test; got also {unknown}")
    return Source(
        f"{path} (token features, attnsim.realdata protocol)", lambda d: (X, labels), *sizes, shape=X.shape
    )


def builtin_name(data: str | None) -> str | None:
    """A built-in dataset's name in any case (as every choice), unless a file has that name."""
    if data is None or Path(data).exists():
        return data
    return data.lower() if data.lower() in BUILTIN else data


def open_data(data: str | Path | Dataset) -> Source | Dataset:
    """What ``--data`` names: a built-in dataset or a features file (a
    :class:`Source`, one run of the protocol per seed), or a data file (SPEC §2)."""
    if isinstance(data, Dataset):
        return data
    if isinstance(data, str) and data in BUILTIN:
        return Source(f"{data} (real data, attnsim.realdata)", BUILTIN[data], builtin=True)
    path = Path(data)
    arrays = read_npz(path)
    return features_source(path, arrays) if "features" in arrays else load_npz(path, arrays)
