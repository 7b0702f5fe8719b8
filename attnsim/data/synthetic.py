"""The paper's synthetic data in d dimensions, and every random stream of a run (SPEC §2).

Random numbers
--------------
One ``np.random.Generator`` is created from ``seed`` here; it spawns four
independent child streams, always in this order, so a seed means the same data
in every release:

0. ``data`` - the training set: token noise (:func:`draw_noise`, or in the
   implicit engine's coordinates :func:`draw_implicit_noise`), then the labels
   and roles (:func:`draw_labels`: one ``permutation(T)`` per sample if
   ``shuffle_roles``, then ``random(n)`` for ``label_noise = iid``).
1. ``init`` - W(0) (row by row, top to bottom, drawn in blocks: :func:`W0_blocks`),
   then p(0) if ``init_p = gaussian``; for the implicit engine its factors
   (:func:`attnsim.models.attention.draws.draw_implicit_init`).
2. ``test`` - the finite test set, in the engine's coordinates
   (:func:`attnsim.models.attention.draws.draw_test_set`).
3. ``population`` - scrambles of the Sobol points of the population metrics,
   then the normals and uniforms of the error's importance sampler
   (:func:`attnsim.models.attention.population.population_points`).

Because the streams are independent, the training tokens depend only on
(seed, n, T, d, roles) and W(0) only on (seed, d): a sweep over ``signal_norm``
with one seed reuses the same noise in every cell, as the official runs do.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from .dataset import IRRELEVANT, RELEVANT, WEAK_ALIGNED, WEAK_OPPOSITE, Dataset, Streams


class DataKeys(NamedTuple):
    """The config keys the synthetic data depends on, and nothing else (``role_counts``:
    relevant, weakly aligned, weakly opposite, irrelevant tokens per sample)."""

    n: int
    T: int
    d: int
    signal_norm: float
    sigma: float
    rho: float
    role_counts: tuple[int, int, int, int]
    shuffle_roles: bool
    data_model: str
    noise_rate: float
    label_noise: str
    init_nu: str
    test_n: int


def data_keys(cfg: Any) -> DataKeys:
    """The data keys of a config (a DataKeys is returned as it is)."""
    if isinstance(cfg, DataKeys):
        return cfg
    return DataKeys(*(getattr(cfg, key) for key in DataKeys._fields))


def signals(d: int, signal_norm: float, data_model: str = "sakamoto2025") -> tuple[np.ndarray, np.ndarray]:
    """mu+ = |mu| e1 and mu- = |mu| e2, or mu- = -mu+ under data_model magen2025
    (in d or in engine coordinates)."""
    mu_pos = np.zeros(d)
    mu_neg = np.zeros(d)
    mu_pos[0] = signal_norm
    if data_model == "magen2025":
        mu_neg[0] = -signal_norm
    else:
        mu_neg[1] = signal_norm
    return mu_pos, mu_neg


def shape_noise(data_model: str, X: np.ndarray, roles: np.ndarray, mu_pos: np.ndarray) -> None:
    """The data model's noise from isotropic draws X (m, T, k), in place: under
    magen2025 the signal token carries none and the noise token's covariance is
    sigma^2 (I - P_mu) (its component along mu removed); else unchanged. The
    draws are the same numbers either way, so the random streams do not change."""
    if data_model != "magen2025":
        return
    X[roles != IRRELEVANT] = 0.0
    mu_hat = mu_pos / np.linalg.norm(mu_pos)
    X -= (X @ mu_hat)[..., None] * mu_hat


def head(mu_pos: np.ndarray, mu_neg: np.ndarray) -> np.ndarray:
    """nu = (mu+ - mu-)/||mu+ - mu-|| / ||mu||, the official head scale."""
    diff = mu_pos - mu_neg
    return diff / np.linalg.norm(diff) / np.linalg.norm(mu_pos)


def role_template(role_counts: tuple[int, int, int, int]) -> np.ndarray:
    """(T,) role codes in the fixed order: relevant, aligned, opposite, irrelevant."""
    return np.repeat(np.arange(4), role_counts).astype(np.int64)


def clean_labels(n: int) -> np.ndarray:
    """First floor(n/2) samples are +1, the rest -1."""
    y = -np.ones(n)
    y[: n // 2] = 1.0
    return y


def flip_mask(
    label_noise: str, noise_rate: float, y_clean: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Which training labels are flipped, by ``label_noise`` (SPEC §2)."""
    n = y_clean.size
    pos = np.flatnonzero(y_clean > 0)
    neg = np.flatnonzero(y_clean < 0)
    mask = np.zeros(n, dtype=bool)
    n_eta = n * exact_fraction(noise_rate)
    if label_noise == "iid":
        mask = rng.random(n) < noise_rate
    elif label_noise == "balanced":
        k = math.ceil(n_eta)
        mask[pos[: k // 2]] = True
        mask[neg[: k // 2]] = True
    else:  # exact: round half up, ceil(m/2) from class +1
        m = math.floor(n_eta + Fraction(1, 2))
        m_pos = min(-(-m // 2), pos.size)
        m_neg = min(m - m_pos, neg.size)
        mask[pos[:m_pos]] = True
        mask[neg[:m_neg]] = True
    return mask


def role_coefficients(roles: np.ndarray, rho: float) -> tuple[np.ndarray, np.ndarray]:
    """Token mean = c_own mu_y + c_other mu_{-y}; the two coefficient arrays."""
    c_own = np.select([roles == RELEVANT, roles == WEAK_ALIGNED], [1.0, rho], 0.0)
    c_other = np.where(roles == WEAK_OPPOSITE, rho, 0.0)
    return c_own, c_other


def draw_roles(
    role_counts: tuple[int, int, int, int], shuffle: bool, m: int, rng: np.random.Generator
) -> np.ndarray:
    """(m, T) role codes: the fixed template, or one permutation per sample."""
    template = role_template(role_counts)
    T = template.size
    if shuffle:
        return np.stack([template[rng.permutation(T)] for _ in range(m)])
    return np.broadcast_to(template, (m, T)).copy()


def add_means(
    X: np.ndarray, y_true: np.ndarray, roles: np.ndarray, rho: float, mu_pos: np.ndarray, mu_neg: np.ndarray
) -> None:
    """Add each token's mean vector (its role's mix of mu+ and mu-) to X (m, T, k) in place."""
    c_own, c_other = role_coefficients(roles, rho)
    pos = (y_true > 0)[:, None]
    a_pos = np.where(pos, c_own, c_other)  # (m, T) coefficient of mu+
    a_neg = np.where(pos, c_other, c_own)
    idx = np.flatnonzero((mu_pos != 0) | (mu_neg != 0))  # the signals' support (e1, e2 when generated)
    X[:, :, idx] += a_pos[:, :, None] * mu_pos[idx] + a_neg[:, :, None] * mu_neg[idx]


def draw_noise(keys: Any, rng: np.random.Generator, d: int | None = None) -> np.ndarray:
    """(n, T, d) token noise, sigma times standard normals (``keys``: :class:`DataKeys` or a config)."""
    dk = data_keys(keys)
    d = dk.d if d is None else d
    return dk.sigma * rng.standard_normal((dk.n, dk.T, d))


def draw_tokens(keys: Any, y_true: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Tokens (m, T, d) and roles (m, T) of fresh samples with labels ``y_true``
    (noise, then roles, then the means added; ``keys``: :class:`DataKeys` or a config)."""
    dk = data_keys(keys)
    X = dk.sigma * rng.standard_normal((y_true.size, dk.T, dk.d))
    roles = draw_roles(dk.role_counts, dk.shuffle_roles, y_true.size, rng)
    mu = signals(dk.d, dk.signal_norm, dk.data_model)
    shape_noise(dk.data_model, X, roles, mu[0])
    add_means(X, y_true, roles, dk.rho, *mu)
    return X, roles


def draw_labels(keys: Any, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y_clean, roles, y) of the training set, drawn after its token noise."""
    dk = data_keys(keys)
    y_clean = clean_labels(dk.n)
    roles = draw_roles(dk.role_counts, dk.shuffle_roles, dk.n, rng)
    y = np.where(flip_mask(dk.label_noise, dk.noise_rate, y_clean, rng), -y_clean, y_clean)
    return y_clean, roles, y


def assemble(
    keys: Any,
    X: np.ndarray,
    y_clean: np.ndarray,
    roles: np.ndarray,
    y: np.ndarray,
    mu_pos: np.ndarray,
    mu_neg: np.ndarray,
    source: str = "generated",
) -> Dataset:
    """The training set from drawn noise X (n, T, k), its labels and the
    signals in the same k coordinates (the means are added to X in place)."""
    dk = data_keys(keys)
    shape_noise(dk.data_model, X, roles, mu_pos)
    add_means(X, y_clean, roles, dk.rho, mu_pos, mu_neg)
    ds = Dataset(
        X=X,
        y=y,
        y_clean=y_clean,
        roles=roles,
        mu_pos=mu_pos,
        mu_neg=mu_neg,
        sigma=dk.sigma,
        nu=head(mu_pos, mu_neg) if dk.init_nu == "head" else np.zeros_like(mu_pos),
        rho=dk.rho,
        role_counts=dk.role_counts,
        source=source,
    )
    expected = dk.n * dk.noise_rate
    msg = None
    if dk.noise_rate > 0 and ds.n_noisy == 0:
        rule = {"balanced": "an even number, ceil(n noise_rate) rounded down", "exact": "round(n noise_rate)"}
        msg = (
            f"label noise: label_noise={dk.label_noise} flips no label at n = {dk.n}, noise_rate = "
            f"{dk.noise_rate:g} ({rule.get(dk.label_noise, 'each with probability noise_rate')}): the "
            "labels are clean; use a larger n or another label_noise"
        )
    elif abs(ds.n_noisy - expected) > 1:
        msg = (
            f"label noise: {ds.n_noisy} noisy samples realized, n*noise_rate = {expected:g} "
            f"(label_noise={dk.label_noise})"
        )
    if msg is not None:
        ds.warnings.append(msg)
        warnings.warn(msg, stacklevel=3)
    return ds


def generate(keys: Any, streams: Streams) -> Dataset:
    """The training set of a run in d dimensions (test sets are drawn by the engine;
    ``keys``: :class:`DataKeys` or a config)."""
    dk = data_keys(keys)
    X = draw_noise(dk, streams.data)
    return assemble(dk, X, *draw_labels(dk, streams.data), *signals(dk.d, dk.signal_norm, dk.data_model))


def exact_fraction(x: float) -> Fraction:
    """The decimal a user typed (0.07 -> 7/100), for exact rounding of n * eta."""
    return Fraction(repr(x))
