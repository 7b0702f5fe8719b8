"""Token tensors, labels and every random draw of a run (SPEC §2).

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
   (:func:`draw_implicit_init`).
2. ``test`` - the finite test set, in the engine's coordinates (:func:`draw_test_set`).
3. ``population`` - scrambles of the Sobol points of the population metrics,
   then the normals and uniforms of the error's importance sampler
   (:func:`attnsim.population.population_points`).

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

from .config import MAX_NORM, Config, ConfigError, exact_fraction, regular_file
from .parallel import halves

ROLE_NAMES = ("relevant", "weak_aligned", "weak_opposite", "irrelevant")
RELEVANT, WEAK_ALIGNED, WEAK_OPPOSITE, IRRELEVANT = range(4)
BLOCK_ELEMENTS = 1 << 22  # W(0) is drawn in row blocks of about this many numbers (32 MB)
DRAW_CHUNK = 1 << 18  # kept draws record the generator's state every this many numbers (2 MB)


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
    X : (n, T, d) training tokens, or None when the engine keeps them in its
        own coordinates (mu_pos, mu_neg and nu are then in those coordinates).
    y : (n,) observed labels in {-1, +1}.
    y_clean : (n,) true labels (equal to ``y`` when unknown).
    roles : (n, T) int role codes, or None when unknown.
    mu_pos, mu_neg : (d,) class signals, or None when unknown.
    sigma, rho : token noise standard deviation and weak-relevance factor, or None when unknown.
    nu : (d,) head vector.
    W0, p0 : initial weights supplied with the data (None: drawn from config).
    X_test, y_test : a supplied test set, or None.
    """

    X: np.ndarray | None
    y: np.ndarray
    y_clean: np.ndarray
    roles: np.ndarray | None
    mu_pos: np.ndarray | None
    mu_neg: np.ndarray | None
    sigma: float | None
    nu: np.ndarray
    rho: float | None = None
    W0: np.ndarray | None = None
    p0: np.ndarray | None = None
    X_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    role_counts: tuple[int, int, int, int] | None = None
    source: str = "generated"
    warnings: list[str] = field(default_factory=list)
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # the encoder's initial parameters, by name

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
            return (
                "population metrics need the token roles (a roles array with the same roles in every sample)"
            )
        if self.rho is None and (self.role_counts[1] or self.role_counts[2]):
            return "population metrics need rho in the data file (the samples have weakly relevant tokens)"
        return None


def signals(d: int, signal_norm: float) -> tuple[np.ndarray, np.ndarray]:
    """mu+ = |mu| e1 and mu- = |mu| e2 (in d or in engine coordinates)."""
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
    """Add each token's mean vector (its role's mix of mu+ and mu-) to X (m, T, k) in place."""
    c_own, c_other = role_coefficients(roles, rho)
    pos = (y_true > 0)[:, None]
    a_pos = np.where(pos, c_own, c_other)  # (m, T) coefficient of mu+
    a_neg = np.where(pos, c_other, c_own)
    idx = np.flatnonzero((mu_pos != 0) | (mu_neg != 0))  # the signals' support (e1, e2 when generated)
    X[:, :, idx] += a_pos[:, :, None] * mu_pos[idx] + a_neg[:, :, None] * mu_neg[idx]


def draw_noise(cfg: Config, rng: np.random.Generator, d: int | None = None) -> np.ndarray:
    """(n, T, d) token noise, sigma times standard normals."""
    d = cfg.d if d is None else d
    return cfg.sigma * rng.standard_normal((cfg.n, cfg.T, d))


def draw_tokens(cfg: Config, y_true: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Tokens (m, T, d) and roles (m, T) of fresh samples with labels ``y_true``
    (noise, then roles, then the means added)."""
    X = cfg.sigma * rng.standard_normal((y_true.size, cfg.T, cfg.d))
    roles = draw_roles(cfg, y_true.size, rng)
    add_means(X, y_true, roles, cfg.rho, *signals(cfg.d, cfg.signal_norm))
    return X, roles


def draw_labels(cfg: Config, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y_clean, roles, y) of the training set, drawn after its token noise."""
    y_clean = clean_labels(cfg.n)
    roles = draw_roles(cfg, cfg.n, rng)
    y = np.where(flip_mask(cfg, y_clean, rng), -y_clean, y_clean)
    return y_clean, roles, y


def assemble(
    cfg: Config, X: np.ndarray, y_clean, roles, y, mu_pos, mu_neg, source: str = "generated"
) -> Dataset:
    """The training set from drawn noise X (n, T, k), its labels and the
    signals in the same k coordinates (the means are added to X in place)."""
    add_means(X, y_clean, roles, cfg.rho, mu_pos, mu_neg)
    ds = Dataset(
        X=X,
        y=y,
        y_clean=y_clean,
        roles=roles,
        mu_pos=mu_pos,
        mu_neg=mu_neg,
        sigma=cfg.sigma,
        nu=head(mu_pos, mu_neg),
        rho=cfg.rho,
        role_counts=cfg.role_counts,
        source=source,
    )
    expected = cfg.n * cfg.noise_rate
    if abs(ds.n_noisy - expected) > 1:
        msg = (
            f"label noise: {ds.n_noisy} noisy samples realized, n*noise_rate = {expected:g} "
            f"(label_noise={cfg.label_noise})"
        )
        ds.warnings.append(msg)
        warnings.warn(msg, stacklevel=3)
    return ds


def generate(cfg: Config, streams: Streams) -> Dataset:
    """The training set of a run in d dimensions (test sets are drawn by the engine)."""
    X = draw_noise(cfg, streams.data)
    return assemble(cfg, X, *draw_labels(cfg, streams.data), *signals(cfg.d, cfg.signal_norm))


def bartlett(
    rng: np.random.Generator, rows: int, cols: int, dof0: int, scale: float, lower: bool
) -> np.ndarray:
    """Triangular factor of a Gaussian matrix with ``dof0`` rows: diagonal
    scale * chi(dof0 - j), off-diagonal N(0, scale^2); (rows x cols), upper
    (or its transpose-shaped lower version with ``lower``). Draw order: the
    diagonal, then the strict triangle in row-major order of the upper form."""
    U = np.zeros((rows, cols))
    j = np.arange(min(rows, cols))
    U[j, j] = np.sqrt(rng.chisquare(dof0 - j))
    iu = np.triu_indices(rows, 1, cols)
    U[iu] = rng.standard_normal(iu[0].size)
    U *= scale
    return U.T if lower else U


def draw_implicit_noise(cfg: Config, rng: np.random.Generator) -> np.ndarray:
    """(n, T, nT + 2) token noise in the basis {e1, e2, token-noise span}:
    i.i.d. N(0, sigma^2) on e1, e2 (drawn first), then the lower-triangular
    Bartlett factor of the noise's other d - 2 coordinates."""
    n, T, d, sig = cfg.n, cfg.T, cfg.d, cfg.sigma
    m = n * T
    X = np.zeros((n, T, m + 2))
    X[:, :, :2] = sig * rng.standard_normal((n, T, 2))
    X[:, :, 2:] = bartlett(rng, m, m, d - 2, sig, lower=True).reshape(n, T, m)
    return X


def draw_implicit_init(cfg: Config, rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The implicit engine's W~(0) = B^T (B the R-factor of the d x k Gaussian
    W(0)^T Q) and U_perp (the Bartlett factor of the (d - k) x k Gaussian part
    of W(0) R outside span(Q), upper-trapezoidal when d - k < k), in that order."""
    s, d = cfg.W_scale, cfg.d
    B = bartlett(rng, k, k, d, s, lower=False)
    U_perp = bartlett(rng, min(k, d - k), k, d - k, s, lower=False)
    return np.ascontiguousarray(B.T), U_perp


def draw_test_set(cfg: Config, rng: np.random.Generator, k: int, mu_pos, mu_neg, U_perp) -> tuple:
    """``test_n`` fresh clean samples in engine coordinates: (X2 (m*T, k),
    O (m*T, rows(U_perp)) or None, y (m,)). A fresh token is its mean plus
    sigma times k normals on Q; its product with the part of W(0) R outside
    span(Q) is sigma g . U_perp with rows(U_perp) more normals g, the same
    numbers at every step. Draw order: roles (if shuffled), the noise on Q
    (m, T, k), then the U_perp normals per token."""
    m = cfg.test_n
    y = clean_labels(m)
    roles = draw_roles(cfg, m, rng)
    X = cfg.sigma * rng.standard_normal((m, cfg.T, k))
    add_means(X, y, roles, cfg.rho, mu_pos, mu_neg)
    outside = None
    if U_perp is not None and U_perp.shape[0] > 0:
        outside = cfg.sigma * (rng.standard_normal((m * cfg.T, U_perp.shape[0])) @ U_perp)
    return X.reshape(m * cfg.T, k), outside, y


def draw_W0(cfg: Config, rng: np.random.Generator, d: int | None = None) -> np.ndarray:
    """W(0), d x d: the numbers of :func:`W0_blocks` (the reduced engine can stream the same blocks)."""
    d = cfg.d if d is None else d
    return fill_W0(cfg, rng, np.empty((d, d)))


def fill_W0(cfg: Config, rng: np.random.Generator, out: np.ndarray) -> np.ndarray:
    """W(0) into ``out`` (d x d), the numbers of :func:`W0_blocks`, and ``rng``
    left where they leave it.

    The uniform init takes exactly one 64-bit draw of the stream per number, so
    the two halves of the rows are drawn at once (:func:`attnsim.parallel.halves`)
    from copies of the stream, the second jumped ahead past the first half
    (``PCG64.advance``); the stream is then jumped past all d^2 numbers. In a
    sweep worker the numbers may come from :data:`KEPT_DRAWS` instead.
    """
    d = out.shape[0]
    kept = KEPT_DRAWS.take(rng, d * d, cfg.init_W)
    if kept is not None:
        flat = out.reshape(-1)
        for lo in range(0, kept.size, DRAW_CHUNK // 8):  # chunks that stay in cache
            chunk = flat[lo : lo + DRAW_CHUNK // 8]
            chunk[:] = kept[lo : lo + chunk.size]
            _scale_draws(cfg, chunk)
        return out
    bg = rng.bit_generator
    state = bg.state
    if cfg.init_W in ("gaussian", "identity") or not hasattr(bg, "advance") or state.get("has_uint32", 1):
        for _ in W0_blocks(cfg, rng, d, out=out):
            pass
        return out

    def rows(lo: int, hi: int) -> None:
        copy = type(bg)()
        copy.state = state
        copy.advance(lo * d)
        np.random.Generator(copy).random(out=out[lo:hi])
        _scale_draws(cfg, out[lo:hi])

    halves(rows, d)
    bg.advance(d * d)
    return out


class KeptDraws:
    """The numbers one stream draws from one state for W(0), kept so that a
    later W(0) drawn from the same state reads them instead.

    A sweep over d with one seed draws W(0) for every d from the same ``init``
    stream state, and W(0) of dimension d is the first d^2 numbers of that
    stream (standard normals or uniforms), scaled for d: the largest d draws
    them, every smaller one reads a prefix. The generator's state is recorded
    every ``DRAW_CHUNK`` numbers, so the stream is left exactly after any
    prefix (at most one chunk is drawn again, and checked against the kept
    numbers). Off unless ``enabled`` (sweep workers turn it on); at most
    ``max_bytes`` are kept, of one stream state and kind at a time.
    """

    KINDS = {"gaussian": "standard_normal", "kaiming_uniform": "random"}

    def __init__(self, max_bytes: int):
        self.enabled = False
        self.max_bytes = max_bytes
        self._key: tuple | None = None
        self._values = np.empty(0)
        self._states: list[dict] = []  # the state after j * DRAW_CHUNK numbers, j = 0, 1, ...

    def take(self, rng: np.random.Generator, n: int, init_W: str) -> np.ndarray | None:
        """The next ``n`` numbers W(0) with ``init_W`` draws from ``rng`` (a view,
        valid until the next call), ``rng`` left after them as the draw would
        leave it; None (nothing drawn) when not enabled, for another init, or
        for more than ``max_bytes``."""
        method = self.KINDS.get(init_W)
        if not self.enabled or method is None or 8 * n > self.max_bytes:
            return None
        bg = rng.bit_generator
        key = (method, type(bg).__name__, repr(bg.state))
        if key != self._key:
            self._key, self._values, self._states = None, np.empty(0), [bg.state]
        draw = getattr(rng, method)
        if n > self._values.size:
            self._extend(rng, draw, n)
        self._key = key
        j = n // DRAW_CHUNK
        bg.state = self._states[j]
        rest = n - j * DRAW_CHUNK
        if rest and not np.array_equal(draw(rest), self._values[n - rest : n]):
            raise RuntimeError("kept draws do not match their stream")  # pragma: no cover
        return self._values[:n]

    def _extend(self, rng: np.random.Generator, draw, n: int) -> None:
        have = self._values.size  # a multiple of the chunk
        values = np.empty(-(-n // DRAW_CHUNK) * DRAW_CHUNK)
        values[:have] = self._values
        self._values = np.empty(0)
        rng.bit_generator.state = self._states[-1]
        for lo in range(have, values.size, DRAW_CHUNK):
            draw(out=values[lo : lo + DRAW_CHUNK])
            self._states.append(rng.bit_generator.state)
        self._values = values


KEPT_DRAWS = KeptDraws(max_bytes=256 * 1024**2)  # W(0) up to d = 5792, as the reduced setup keeps it


def W0_block_rows(d: int) -> int:
    """Rows per block of :func:`W0_blocks`: about ``BLOCK_ELEMENTS`` numbers, >= 64 rows."""
    return min(d, max(64, BLOCK_ELEMENTS // d))


def W0_blocks(cfg: Config, rng: np.random.Generator, d: int, out: np.ndarray | None = None, buf=None):
    """Yield (first row, block) of W(0) in row blocks of :func:`W0_block_rows`
    rows, top to bottom; the draws are identical to one full draw. Blocks are
    views of ``out`` (d x d) when given, else of one reused buffer ``buf``
    (allocated if None; memory O(BLOCK_ELEMENTS + 64 d): copy a block to keep it)."""
    rows = W0_block_rows(d)
    if out is None and buf is None:
        buf = np.empty((rows, d))
    for lo in range(0, d, rows):
        hi = min(d, lo + rows)
        block = out[lo:hi] if out is not None else buf[: hi - lo]
        if cfg.init_W == "identity":
            block[:] = 0.0
            block[np.arange(hi - lo), np.arange(lo, hi)] = 1.0
        else:
            getattr(rng, KeptDraws.KINDS[cfg.init_W])(out=block)
            _scale_draws(cfg, block)
        yield lo, block


def _scale_draws(cfg: Config, block: np.ndarray) -> None:
    """W(0)'s numbers from its raw draws, in place: standard normals times the
    scale, or for kaiming_uniform the uniforms u on [0, 1) to U(-a, a) as
    rng.uniform(-a, a) computes them, -a + 2a u (one 64-bit draw per number;
    U(-a, a) has std a / sqrt(3))."""
    if cfg.init_W == "gaussian":
        block *= cfg.W_scale
    else:
        a = cfg.W_scale * math.sqrt(3.0)
        block *= 2.0 * a
        block -= a


def draw_p0(cfg: Config, rng: np.random.Generator, d: int | None = None) -> np.ndarray:
    d = cfg.d if d is None else d
    if cfg.init_p == "zeros":
        return np.zeros(d)
    return cfg.p_scale * rng.standard_normal(d)


# -- user-supplied arrays ---------------------------------------------------

OPTIONAL_ARRAYS = (
    "y_clean",
    "roles",
    "mu_pos",
    "mu_neg",
    "sigma",
    "rho",
    "W0",
    "p0",
    "nu",
    "X_test",
    "y_test",
)
# the encoder's parameters, in PyTorch's shapes (SPEC §12)
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
)


def encoder_shapes(d: int, m: int) -> dict[str, tuple]:
    """Every encoder parameter's shape, as PyTorch stores it (d width, m MLP width)."""
    return {
        "cls": (1, 1, d),
        "ln1_g": (d,),
        "ln1_b": (d,),
        "W_qkv": (3 * d, d),
        "ln2_g": (d,),
        "ln2_b": (d,),
        "W1": (m, d),
        "b1": (m,),
        "W2": (d, m),
        "b2": (d,),
        "lnf_g": (d,),
        "lnf_b": (d,),
        "head_w": (1, d),
        "head_b": (1,),
    }


def read_npz(path: Path, max_bytes: float | None = None) -> dict[str, np.ndarray]:
    """Every array of an .npz file, after checking each member's declared shape
    and dtype (no object arrays; the total size fits in memory) from its header,
    before anything is decompressed."""
    import zipfile

    from .engines import physical_memory

    limit = 0.5 * physical_memory() if max_bytes is None else max_bytes
    try:
        regular_file(path, "data")
    except ConfigError as exc:
        raise DataError(str(exc)) from None
    try:
        with zipfile.ZipFile(path) as zf:
            total = 0
            for info in zf.infolist():
                name = info.filename.removesuffix(".npy")
                with zf.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    read = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else (np.lib.format.read_array_header_2_0)
                    )
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
    except Exception as exc:  # any unreadable file is the user's input error
        raise DataError(f"{path}: not a readable .npz file ({type(exc).__name__})") from None


class ArrayChecks:
    """Validators of the arrays of one data file; each raises DataError naming
    the file and the array."""

    def __init__(self, path: Path, arrays: dict[str, np.ndarray]):
        self.path, self.arrays = path, arrays

    def fail(self, message: str):
        raise DataError(f"{self.path}: {message}")

    def numeric(self, name: str, shape: tuple) -> np.ndarray:
        """A finite float64 array of ``shape`` (None entries: any size)."""
        a = self.arrays[name]
        if a.dtype.kind not in "biuf":
            self.fail(f"array {name!r} must be numeric, got dtype {a.dtype}")
        if a.ndim != len(shape) or any(s is not None and s != t for s, t in zip(shape, a.shape)):
            want = tuple("?" if s is None else s for s in shape) if shape else "a scalar"
            self.fail(f"array {name!r} has shape {a.shape}, expected {want}")
        a = np.array(a, dtype=np.float64, order="C")  # keeps 0-d arrays 0-d
        if not np.all(np.isfinite(a)):
            self.fail(f"array {name!r} contains NaN or infinite values")
        return a

    def optional(self, name: str, shape: tuple) -> np.ndarray | None:
        return self.numeric(name, shape) if name in self.arrays else None

    def labels(self, name: str, n: int) -> np.ndarray:
        a = self.numeric(name, (n,))
        if not np.all(np.isin(a, (-1.0, 1.0))):
            self.fail(f"array {name!r} must hold labels -1 or +1")
        return a

    def scalar(self, name: str, positive: bool) -> float | None:
        if name not in self.arrays:
            return None
        v = float(self.numeric(name, ()))
        if positive and not v > 0:
            self.fail(f"array {name!r} must be a positive scalar")
        return v

    def roles(self, n: int, T: int) -> tuple[np.ndarray | None, tuple | None]:
        """(roles, role counts when every sample has the same composition)."""
        if "roles" not in self.arrays:
            return None, None
        r = self.arrays["roles"]
        if r.shape != (n, T) or r.dtype.kind not in "iu" or np.any((r < 0) | (r > 3)):
            self.fail(f"array 'roles' must be ints in 0..3 of shape {(n, T)}")
        roles = r.astype(np.int64)
        counts = np.stack([np.count_nonzero(roles == k, axis=1) for k in range(4)], axis=1)
        return roles, (tuple(int(c) for c in counts[0]) if np.all(counts == counts[0]) else None)

    def magnitudes(self, d: int) -> None:
        for name in ("X", "mu_pos", "mu_neg", "nu", "W0", "p0", "X_test"):
            a = self.arrays.get(name)
            if a is not None and a.size and float(np.abs(a).max()) * math.sqrt(d) > MAX_NORM:
                self.fail(
                    f"array {name!r} has entries up to {float(np.abs(a).max()):.3g}; norms above "
                    f"{MAX_NORM:.0e} overflow float64 in products: rescale the data"
                )

    def head(self, d: int, mu_pos, mu_neg) -> np.ndarray:
        if "nu" in self.arrays:
            return self.numeric("nu", (d,))
        if mu_pos is None or mu_neg is None:
            self.fail(
                "need array 'nu' (d,), or 'mu_pos' and 'mu_neg' to build it (X and y alone define no head)"
            )
        if not (np.linalg.norm(mu_pos - mu_neg) > 0 and np.linalg.norm(mu_pos) > 0):
            self.fail(
                "cannot build the head nu = (mu_pos - mu_neg)/|mu_pos - mu_neg|/|mu_pos| "
                "(mu_pos equals mu_neg or is zero): supply array 'nu'"
            )
        return head(mu_pos, mu_neg)

    def test_set(self, T: int, d: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        if ("X_test" in self.arrays) != ("y_test" in self.arrays):
            self.fail("arrays 'X_test' and 'y_test' must be given together")
        if "X_test" not in self.arrays:
            return None, None
        X_test = self.numeric("X_test", (None, T, d))
        return X_test, self.labels("y_test", X_test.shape[0])


def load_npz(path: str | Path, arrays: dict[str, np.ndarray] | None = None) -> Dataset:
    """Read and validate ``--data FILE.npz`` (SPEC §2); raises DataError.

    Required: X (n, T, d), y (n,) and a head: nu (d,), or mu_pos and mu_neg
    to build it. Optional: y_clean, roles, mu_pos, mu_neg, sigma, rho, W0, p0,
    X_test with y_test.
    """
    path = Path(path)
    v = ArrayChecks(path, read_npz(path) if arrays is None else arrays)
    for key in ("X", "y"):
        if key not in v.arrays:
            v.fail(f"missing required array {key!r} (need X (n,T,d), y (n,) and nu (d,) or mu_pos, mu_neg)")
    X = v.numeric("X", (None, None, None))
    n, T, d = X.shape
    if n < 2 or T < 1 or d < 2:
        v.fail(f"array 'X' has shape {X.shape}, expected (n>=2, T>=1, d>=2)")
    v.magnitudes(d)
    y = v.labels("y", n)
    roles, role_counts = v.roles(n, T)
    mu_pos, mu_neg = v.optional("mu_pos", (d,)), v.optional("mu_neg", (d,))
    X_test, y_test = v.test_set(T, d)
    unknown = sorted(set(v.arrays) - set(OPTIONAL_ARRAYS) - set(ENCODER_ARRAYS) - {"X", "y"})
    extra = {name: v.numeric(name, v.arrays[name].shape) for name in ENCODER_ARRAYS if name in v.arrays}
    return Dataset(
        X=X,
        y=y,
        y_clean=v.labels("y_clean", n) if "y_clean" in v.arrays else y.copy(),
        roles=roles,
        mu_pos=mu_pos,
        mu_neg=mu_neg,
        sigma=v.scalar("sigma", positive=True),
        rho=v.scalar("rho", positive=False),
        nu=v.head(d, mu_pos, mu_neg),
        W0=v.optional("W0", (d, d)),
        p0=v.optional("p0", (d,)),
        X_test=X_test,
        y_test=y_test,
        role_counts=role_counts,
        source=str(path),
        warnings=[f"{path}: ignored arrays {unknown}"] if unknown else [],
        extra=extra,
    )


# config keys the data file decides, and what decides them
_FROM_DATA = {
    "n": "X",
    "T": "X",
    "d": "X",
    "signal_norm": "mu_pos",
    "sigma": "sigma",
    "rho": "rho",
    "n_relevant": "roles",
    "n_weak_aligned": "roles",
    "n_weak_opposite": "roles",
    "shuffle_roles": "roles",
    "noise_rate": "y",
    "label_noise": "y",
    "test_n": "X_test",
    "init_W": "W0",
    "init_W_scale": "W0",
    "init_p": "p0",
    "init_p_scale": "p0",
    "mlp_dim": "W1",
}


def decided_keys(ds: Dataset) -> dict[str, str]:
    """The config keys a data file decides, each with the array that decides it
    (a sweep refuses them: every point would be the same run)."""
    always = (
        "X",
        "y",
        "X_test",
    )  # shapes and labels; without X_test the test set is the file's absence of one
    return {k: src for k, src in _FROM_DATA.items() if src in always or getattr(ds, src, None) is not None}


def changed_keys(cfg: Config) -> set[str]:
    """The keys of ``cfg`` that differ from their defaults."""
    return {k for k, v in cfg.to_dict(resolved=False).items() if v != getattr(Config(), k)}


def config_for_data(cfg: Config, ds: Dataset, explicit: set[str] | None = None) -> Config:
    """The config with what the arrays decide (n, T, d, and |mu|, sigma, rho,
    role counts when given), and a warning for every key in ``explicit`` (the
    keys the user set; None: those that differ from the defaults) that the
    data file overrides or makes meaningless."""
    n, T, d = ds.X.shape
    changes: dict = {"n": n, "T": T, "d": d}
    if cfg.T != T and cfg.n_relevant + cfg.n_weak_aligned + cfg.n_weak_opposite > T:
        changes.update(n_relevant=1, n_weak_aligned=0, n_weak_opposite=0)
    if ds.role_counts is not None:
        changes.update(zip(("n_relevant", "n_weak_aligned", "n_weak_opposite"), ds.role_counts[:3]))
    if ds.mu_pos is not None:
        changes["signal_norm"] = float(np.linalg.norm(ds.mu_pos))
    if ds.sigma is not None:
        changes["sigma"] = ds.sigma
    if ds.rho is not None:
        changes["rho"] = ds.rho
    if ds.X_test is not None:
        changes["test_n"] = int(ds.X_test.shape[0])
    if "W1" in ds.extra and ds.extra["W1"].ndim == 2:
        changes["mlp_dim"] = int(ds.extra["W1"].shape[0])
    if explicit is None:
        explicit = changed_keys(cfg)
    decided = {k: src for k, src in _FROM_DATA.items() if k in explicit}
    overridden = []
    for key, src in decided.items():
        if key in changes and changes[key] != getattr(cfg, key):
            overridden.append(f"{key} ({getattr(cfg, key)!r} -> {changes[key]!r}, from {src})")
        elif key not in changes and (src in ("y", "X_test") or getattr(ds, src, None) is not None):
            overridden.append(f"{key} (ignored: the data file's {src} decides)")
    if overridden:
        msg = f"--data {ds.source}: config keys overridden by the data file: " + "; ".join(overridden)
        ds.warnings.append(msg)
        warnings.warn(msg, stacklevel=2)
    try:
        return cfg.replace(**changes)
    except ConfigError as exc:
        raise DataError(f"{ds.source}: {exc}") from None
