"""User data files: ``--data FILE.npz`` read, checked and turned into a Dataset (SPEC §2)."""

from __future__ import annotations

import math
import warnings
import zipfile
from pathlib import Path
from typing import NoReturn

import numpy as np

from .. import registry
from ..config import Config, ConfigError, regular_file
from ..config_rules import MAX_NORM
from ..runtime.resources import physical_memory
from .dataset import DataError, Dataset
from .synthetic import head

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


def member_shapes(path: str | Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The shape and dtype of every array of an .npz file, from the members' headers
    alone (nothing is decompressed beyond them); {} for what is not a readable .npz
    (:func:`read_npz` then says why)."""
    out = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                with zf.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    read = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else (np.lib.format.read_array_header_2_0)
                    )
                    shape, _, dtype = read(fh)
                out[info.filename.removesuffix(".npy")] = (tuple(shape), dtype)
    except Exception:  # noqa: BLE001  (anything unreadable is read_npz's to report)
        return {}
    return out


def read_npz(path: Path, max_bytes: float | None = None) -> dict[str, np.ndarray]:
    """Every array of an .npz file, after checking each member's declared shape
    and dtype (no object arrays; the total size fits in memory) from its header,
    before anything is decompressed."""
    limit = 0.5 * physical_memory() if max_bytes is None else max_bytes
    try:
        regular_file(path, "data")
    except ConfigError as exc:
        raise DataError(str(exc)) from None
    try:
        with zipfile.ZipFile(path) as zf:
            total = 0
            seen: set[str] = set()
            for info in zf.infolist():
                name = info.filename.removesuffix(".npy")
                if name in seen:  # np.load would keep the second silently
                    raise DataError(f"{path}: two arrays are named {name!r}; a data file holds one of each")
                seen.add(name)
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

    def fail(self, message: str) -> NoReturn:
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

    def head(self, d: int, mu_pos: np.ndarray | None, mu_neg: np.ndarray | None) -> np.ndarray:
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
    model_arrays = registry.model_arrays()
    unknown = sorted(set(v.arrays) - set(OPTIONAL_ARRAYS) - set(model_arrays) - {"X", "y"})
    extra = {name: v.numeric(name, v.arrays[name].shape) for name in model_arrays if name in v.arrays}
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
    **{key: array for entry in registry.MODELS.values() for key, (array, _) in entry.decided.items()},
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
    """The keys of ``cfg`` that differ from their defaults (under its model: the encoder's test_n
    of 1000 is its default, not a key the user set)."""
    defaults = Config(model=cfg.model)
    return {k for k, v in cfg.to_dict(resolved=False).items() if v != getattr(defaults, k)}


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
    for entry in registry.MODELS.values():  # a model's keys its parameter arrays decide (mlp_dim from W1)
        for key, (array, axis) in entry.decided.items():
            if array in ds.extra and ds.extra[array].ndim > axis:
                changes[key] = int(ds.extra[array].shape[axis])
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
