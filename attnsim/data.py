"""Token tensors, labels and the run's random numbers (SPEC §2).

Random numbers
--------------
One ``np.random.Generator`` is created from ``seed`` here; it spawns four
independent child streams, always in this order, so a seed means the same data
in every release:

0. ``data``  - training set: token noise ``standard_normal((n, T, d))``, then one
   ``permutation(T)`` per sample if ``shuffle_roles``, then ``random(n)`` for
   ``label_noise = iid``.
1. ``init``  - W(0) (row by row, top to bottom, drawn in blocks), then p(0)
   if ``init_p = gaussian``.
2. ``test``  - the finite test set, drawn in the engine's coordinates (see
   :func:`attnsim.engines.sample_test`; clean labels).
3. ``population`` - scrambles of the Sobol points used by the population metrics.

Because the streams are independent, the training tokens depend only on
(seed, n, T, d, roles) and W(0) only on (seed, d): a sweep over ``signal_norm``
with one seed reuses the same noise in every cell, as the official runs do.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from .config import MAX_NORM, Config, ConfigError, exact_fraction

ROLE_NAMES = ("relevant", "weak_aligned", "weak_opposite", "irrelevant")
RELEVANT, WEAK_ALIGNED, WEAK_OPPOSITE, IRRELEVANT = range(4)
BLOCK_ELEMENTS = 1 << 22  # W(0) is drawn in row blocks of about this many numbers (32 MB)


class DataError(ValueError):
    """A user-supplied data file is missing, unreadable or malformed."""


@dataclass
class Streams:
    data: np.random.Generator
    init: np.random.Generator
    test: np.random.Generator
    population: np.random.Generator


def make_streams(seed: int) -> Streams:
    """The run's Generator and its four child streams (see module docstring)."""
    root = np.random.default_rng(seed)
    return Streams(*root.spawn(4))


@dataclass
class Dataset:
    """Training (and optional test) tokens with labels and generative facts.

    Attributes
    ----------
    X : (n, T, d) training tokens (None for the implicit engine, which keeps
        its tokens in its own coordinates; mu_pos, mu_neg and nu are then in
        those coordinates too).
    y : (n,) observed labels in {-1, +1}.
    y_clean : (n,) true labels (equal to ``y`` when unknown).
    roles : (n, T) int role codes, or None when unknown.
    mu_pos, mu_neg : (d,) class signals, or None when unknown.
    sigma : token noise standard deviation, or None when unknown.
    nu : (d,) head vector.
    W0, p0 : initial weights supplied with the data (None: drawn from config).
    X_test, y_test : a supplied or drawn test set, or None.
    """

    X: np.ndarray | None
    y: np.ndarray
    y_clean: np.ndarray
    roles: np.ndarray | None
    mu_pos: np.ndarray | None
    mu_neg: np.ndarray | None
    sigma: float | None
    nu: np.ndarray
    W0: np.ndarray | None = None
    p0: np.ndarray | None = None
    X_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    role_counts: tuple[int, int, int, int] | None = None
    source: str = "generated"
    warnings: list[str] = field(default_factory=list)

    @property
    def noisy(self) -> np.ndarray:
        return self.y != self.y_clean

    @property
    def n_noisy(self) -> int:
        return int(np.count_nonzero(self.noisy))

    @property
    def population_reason(self) -> str | None:
        """Why population metrics cannot be computed, or None if they can."""
        if self.mu_pos is None or self.mu_neg is None or self.sigma is None:
            return "population metrics need mu_pos, mu_neg and sigma in the data file"
        if self.role_counts is None:
            return "population metrics need a fixed role composition (roles array)"
        return None


def signals(d: int, signal_norm: float) -> tuple[np.ndarray, np.ndarray]:
    mu_pos = np.zeros(d)
    mu_neg = np.zeros(d)
    mu_pos[0] = signal_norm
    mu_neg[1] = signal_norm
    return mu_pos, mu_neg


def head(mu_pos: np.ndarray, mu_neg: np.ndarray) -> np.ndarray:
    """nu = (mu+ - mu-)/||mu+ - mu-|| / ||mu||, the official head scale."""
    diff = mu_pos - mu_neg
    return diff / np.linalg.norm(diff) / np.linalg.norm(mu_pos)


def role_template(cfg: Config) -> np.ndarray:
    """(T,) role codes in the fixed order: relevant, aligned, opposite, irrelevant."""
    return np.repeat(np.arange(4), cfg.role_counts).astype(np.int64)


def clean_labels(n: int) -> np.ndarray:
    """First floor(n/2) samples are +1, the rest -1."""
    y = -np.ones(n)
    y[: n // 2] = 1.0
    return y


def flip_mask(cfg: Config, y_clean: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Which training labels are flipped, by ``label_noise`` (SPEC §2)."""
    n = y_clean.size
    pos = np.flatnonzero(y_clean > 0)
    neg = np.flatnonzero(y_clean < 0)
    mask = np.zeros(n, dtype=bool)
    n_eta = n * exact_fraction(cfg.noise_rate)
    if cfg.label_noise == "iid":
        mask = rng.random(n) < cfg.noise_rate
    elif cfg.label_noise == "balanced":
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


def draw_roles(cfg: Config, m: int, rng: np.random.Generator) -> np.ndarray:
    """(m, T) role codes: the fixed template, or one permutation per sample."""
    template = role_template(cfg)
    if cfg.shuffle_roles:
        return np.stack([template[rng.permutation(cfg.T)] for _ in range(m)])
    return np.broadcast_to(template, (m, cfg.T)).copy()


def add_means(X: np.ndarray, y_true: np.ndarray, roles: np.ndarray, rho: float, mu_pos, mu_neg) -> None:
    """Add each token's mean vector (its role's mix of mu+ and mu-) to X in place."""
    c_own, c_other = role_coefficients(roles, rho)
    pos = (y_true > 0)[:, None]
    a_pos = np.where(pos, c_own, c_other)  # (m, T) coefficient of mu+
    a_neg = np.where(pos, c_other, c_own)
    idx = np.flatnonzero((mu_pos != 0) | (mu_neg != 0))  # the signals' support (e1, e2 when generated)
    X[:, :, idx] += a_pos[:, :, None] * mu_pos[idx] + a_neg[:, :, None] * mu_neg[idx]


def draw_tokens(
    cfg: Config, y_true: np.ndarray, rng: np.random.Generator, d: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Tokens (m, T, d) for samples with true labels ``y_true``, and their roles."""
    d = cfg.d if d is None else d
    X = cfg.sigma * rng.standard_normal((y_true.size, cfg.T, d))
    roles = draw_roles(cfg, y_true.size, rng)
    mu_pos, mu_neg = signals(d, cfg.signal_norm)
    add_means(X, y_true, roles, cfg.rho, mu_pos, mu_neg)
    return X, roles


def generate(cfg: Config, streams: Streams) -> Dataset:
    """The training set of a run (test sets are drawn by the engine)."""
    y_clean = clean_labels(cfg.n)
    X, roles = draw_tokens(cfg, y_clean, streams.data)
    flips = flip_mask(cfg, y_clean, streams.data)
    y = np.where(flips, -y_clean, y_clean)
    mu_pos, mu_neg = signals(cfg.d, cfg.signal_norm)
    ds = Dataset(
        X=X,
        y=y,
        y_clean=y_clean,
        roles=roles,
        mu_pos=mu_pos,
        mu_neg=mu_neg,
        sigma=cfg.sigma,
        nu=head(mu_pos, mu_neg),
        role_counts=cfg.role_counts,
    )
    _check_noise_count(cfg, ds)
    return ds


def _check_noise_count(cfg: Config, ds: Dataset) -> None:
    expected = cfg.n * cfg.noise_rate
    if abs(ds.n_noisy - expected) > 1:
        msg = (
            f"label noise: {ds.n_noisy} noisy samples realized, n*noise_rate = {expected:g} "
            f"(label_noise={cfg.label_noise})"
        )
        ds.warnings.append(msg)
        warnings.warn(msg, stacklevel=3)


def draw_W0(cfg: Config, rng: np.random.Generator, d: int | None = None) -> np.ndarray:
    """W(0), d x d, drawn in row blocks (the reduced engine streams the same blocks)."""
    d = cfg.d if d is None else d
    W = np.empty((d, d))
    for _ in W0_blocks(cfg, rng, d, out=W):
        pass
    return W


def W0_block_rows(d: int) -> int:
    """Rows per block of :func:`W0_blocks`: about ``BLOCK_ELEMENTS`` numbers, >= 64 rows."""
    return min(d, max(64, BLOCK_ELEMENTS // d))


def W0_blocks(cfg: Config, rng: np.random.Generator, d: int, out: np.ndarray | None = None, buf=None):  # noqa: N802
    """Yield (first row, block) of W(0) in row blocks of :func:`W0_block_rows`
    rows, top to bottom; the draws are identical to one full draw. Blocks are
    views of ``out`` (d x d) when given, else of one reused buffer ``buf``
    (allocated if None; memory O(BLOCK_ELEMENTS + 64 d): copy a block to keep it)."""
    rows = W0_block_rows(d)
    if out is None and buf is None:
        buf = np.empty((rows, d))
    a = cfg.W_scale * math.sqrt(3.0)  # kaiming_uniform: U(-a, a) has std a / sqrt(3)
    for lo in range(0, d, rows):
        hi = min(d, lo + rows)
        block = out[lo:hi] if out is not None else buf[: hi - lo]
        if cfg.init_W == "identity":
            block[:] = 0.0
            block[np.arange(hi - lo), np.arange(lo, hi)] = 1.0
        elif cfg.init_W == "gaussian":
            rng.standard_normal(out=block)
            block *= cfg.W_scale
        else:
            rng.random(out=block)  # the doubles rng.uniform(-a, a) would use
            block *= 2.0 * a
            block -= a  # -a + 2a u, exactly as rng.uniform computes it
        yield lo, block


def draw_p0(cfg: Config, rng: np.random.Generator, d: int | None = None) -> np.ndarray:
    d = cfg.d if d is None else d
    if cfg.init_p == "zeros":
        return np.zeros(d)
    return cfg.p_scale * rng.standard_normal(d)


# -- user-supplied arrays ---------------------------------------------------

_OPTIONAL = ("y_clean", "roles", "mu_pos", "mu_neg", "sigma", "W0", "p0", "nu", "X_test", "y_test")


def read_npz(path: Path, max_bytes: float | None = None) -> dict[str, np.ndarray]:
    """Every array of an .npz file, after checking each member's declared shape
    and dtype (no object arrays; the total size fits in memory) from its header,
    before anything is decompressed."""
    import zipfile

    from .engines import physical_memory

    limit = 0.5 * physical_memory() if max_bytes is None else max_bytes
    try:
        with zipfile.ZipFile(path) as zf:
            total = 0
            for info in zf.infolist():
                name = info.filename.removesuffix(".npy")
                with zf.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else (
                        np.lib.format.read_array_header_2_0)  # fmt: skip
                    shape, _, dtype = read(fh)
                if dtype.hasobject:
                    raise DataError(
                        f"{path}: array {name!r} holds Python objects; object arrays are not allowed"
                    )
                total += math.prod(shape) * dtype.itemsize
                if total > limit:
                    raise DataError(
                        f"{path}: array {name!r} has shape {shape} ({dtype}): the arrays would need "
                        f"{total / 1e9:.3g} GB in memory (at most {limit / 1e9:.3g} GB here)"
                    )
        with np.load(path, allow_pickle=False) as f:
            return {k: np.asarray(f[k]) for k in f.files}
    except FileNotFoundError:
        raise DataError(f"{path}: no such data file") from None
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's input error
        raise DataError(f"{path}: not a readable .npz file ({type(exc).__name__})") from None


def load_npz(path: str | Path, cfg: Config) -> Dataset:
    """Read and validate ``--data FILE.npz`` (SPEC §2); raises DataError."""
    path = Path(path)
    arrays = read_npz(path)
    for key in ("X", "y"):
        if key not in arrays:
            raise DataError(f"{path}: missing required array {key!r} (need X (n,T,d) and y (n,))")

    def num(name: str, ndim: int, shape: tuple | None = None) -> np.ndarray:
        a = arrays[name]
        if a.dtype.kind not in "biuf":
            raise DataError(f"{path}: array {name!r} must be numeric, got dtype {a.dtype}")
        if a.ndim != ndim or (shape is not None and a.shape != shape):
            want = shape if shape is not None else f"{ndim}-d"
            raise DataError(f"{path}: array {name!r} has shape {a.shape}, expected {want}")
        a = np.array(a, dtype=np.float64, order="C")  # keeps 0-d arrays 0-d
        if not np.all(np.isfinite(a)):
            raise DataError(f"{path}: array {name!r} contains NaN or infinite values")
        return a

    def labels(name: str, n: int) -> np.ndarray:
        a = num(name, 1, (n,))
        if not np.all(np.isin(a, (-1.0, 1.0))):
            raise DataError(f"{path}: array {name!r} must hold labels -1 or +1")
        return a

    X = num("X", 3)
    n, T, d = X.shape
    if n < 2 or T < 1 or d < 1:
        raise DataError(f"{path}: array 'X' has shape {X.shape}, expected (n>=2, T>=1, d>=1)")
    y = labels("y", n)
    unknown = set(arrays) - set(_OPTIONAL) - {"X", "y"}
    ds_warn = [f"{path}: ignored arrays {sorted(unknown)}"] if unknown else []
    get = arrays.get
    y_clean = labels("y_clean", n) if "y_clean" in arrays else y.copy()
    roles = None
    role_counts = None
    if "roles" in arrays:
        r = arrays["roles"]
        if r.shape != (n, T) or r.dtype.kind not in "iu" or np.any((r < 0) | (r > 3)):
            raise DataError(f"{path}: array 'roles' must be ints in 0..3 of shape {(n, T)}")
        roles = r.astype(np.int64)
        counts = np.stack([np.count_nonzero(roles == k, axis=1) for k in range(4)], axis=1)
        if np.all(counts == counts[0]):
            role_counts = tuple(int(c) for c in counts[0])
    mu_pos = num("mu_pos", 1, (d,)) if "mu_pos" in arrays else None
    mu_neg = num("mu_neg", 1, (d,)) if "mu_neg" in arrays else None
    sigma = None
    if get("sigma") is not None:
        s = num("sigma", 0)
        if not s > 0:
            raise DataError(f"{path}: array 'sigma' must be a positive scalar")
        sigma = float(s)
    if roles is None and mu_pos is not None:
        role_counts = cfg.role_counts if cfg.T == T else None
    for name in ("X", "mu_pos", "mu_neg", "nu", "W0", "p0", "X_test"):
        if name in arrays and arrays[name].size:
            big = float(np.abs(arrays[name]).max())
            if big * math.sqrt(d) > MAX_NORM:
                raise DataError(
                    f"{path}: array {name!r} has entries up to {big:.3g}; norms above {MAX_NORM:.0e} "
                    "overflow float64 in products: rescale the data"
                )
    if "nu" in arrays:
        nu = num("nu", 1, (d,))
    elif mu_pos is not None and mu_neg is not None:
        if not np.linalg.norm(mu_pos - mu_neg) > 0 or not np.linalg.norm(mu_pos) > 0:
            raise DataError(
                f"{path}: cannot build the head nu = (mu_pos - mu_neg)/|mu_pos - mu_neg|/|mu_pos| "
                "(mu_pos equals mu_neg or is zero): supply array 'nu'"
            )
        nu = head(mu_pos, mu_neg)
    else:
        raise DataError(f"{path}: need array 'nu' (d,), or 'mu_pos' and 'mu_neg' to build it")
    W0 = num("W0", 2, (d, d)) if "W0" in arrays else None
    p0 = num("p0", 1, (d,)) if "p0" in arrays else None
    X_test = y_test = None
    if ("X_test" in arrays) != ("y_test" in arrays):
        raise DataError(f"{path}: arrays 'X_test' and 'y_test' must be given together")
    if "X_test" in arrays:
        X_test = num("X_test", 3)
        if X_test.shape[1:] != (T, d):
            raise DataError(f"{path}: array 'X_test' has shape {X_test.shape}, expected (m, {T}, {d})")
        y_test = labels("y_test", X_test.shape[0])
    return Dataset(
        X=X,
        y=y,
        y_clean=y_clean,
        roles=roles,
        mu_pos=mu_pos,
        mu_neg=mu_neg,
        sigma=sigma,
        nu=nu,
        W0=W0,
        p0=p0,
        X_test=X_test,
        y_test=y_test,
        role_counts=role_counts,
        source=str(path),
        warnings=ds_warn,
    )


def config_for_data(cfg: Config, ds: Dataset) -> Config:
    """The config with n, T, d taken from user-supplied arrays."""
    n, T, d = ds.X.shape
    changes = {"n": n, "T": T, "d": d}
    if cfg.T != T:
        used = cfg.n_relevant + cfg.n_weak_aligned + cfg.n_weak_opposite
        if used > T:
            changes.update(n_relevant=1, n_weak_aligned=0, n_weak_opposite=0)
    if ds.role_counts is not None:
        changes.update(
            n_relevant=ds.role_counts[0],
            n_weak_aligned=ds.role_counts[1],
            n_weak_opposite=ds.role_counts[2],
        )
    if ds.mu_pos is not None:
        changes["signal_norm"] = float(np.linalg.norm(ds.mu_pos))
    if ds.sigma is not None:
        changes["sigma"] = ds.sigma
    try:
        return cfg.replace(**changes)
    except ConfigError as exc:
        raise DataError(f"{ds.source}: {exc}") from None
