"""Reading the files a config comes from: a regular file of bounded size (never a folder, a
device or a pipe), TOML (a byte-order mark allowed), a run's TOML with its ``data`` key read
relative to the file. Errors are ConfigErrors naming the file."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from ._meta import ConfigError

MAX_TOML_BYTES = 16 * 2**20  # config and sweep files are a few kB; a larger one is a mistake


def regular_file(path: str | Path, what: str, max_bytes: float | None = None) -> Path:
    """``path`` if it is a regular file (following symlinks) of at most
    ``max_bytes``; else a ConfigError naming it (a folder, a device such as
    /dev/zero or a pipe would hang or fail a reader)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such {what} file (cannot read it)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what} file ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a device, pipe or socket"
        raise ConfigError(f"{path}: not a regular file ({kind}); give a {what} file")
    if max_bytes is not None and st.st_size > max_bytes:
        raise ConfigError(f"{path}: larger than {max_bytes / 2**20:.0f} MB; not a {what} file")
    return Path(path)


def read_toml(path: str | Path, what: str = "config") -> dict[str, Any]:
    """A TOML file as a mapping; unreadable or invalid files are ConfigErrors."""
    regular_file(path, what, MAX_TOML_BYTES)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        # a byte-order mark (Windows editors write one) is not TOML, but it is no error of the user's
        return tomllib.loads(raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what} file ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid TOML (not UTF-8 text)") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise ConfigError(f"{path}: a value nested too deep to read; no config key nests beyond 2") from None


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a config TOML file (top-level keys, or a [config] table)."""
    data = read_toml(path)
    if set(data) == {"config"} and isinstance(data["config"], dict):
        data = data["config"]
    return data


def file_data(values: dict[str, Any], path: str | Path) -> str | None:
    """Pop a config file's ``data`` key (a data file relative to the config file, never to
    the working folder, or a built-in dataset's name), as a sweep file's ``[sweep] data``."""
    data = values.pop("data", None)
    if data is None:
        return None
    if not isinstance(data, str) or not data:
        raise ConfigError(f"{path}: data: expected a file name or a built-in dataset, got {data!r}")
    if Path(data).is_absolute():
        return data
    near = Path(path).parent / data
    if near.exists() or (os.sep not in data and "." not in data):  # a file beside it, or a built-in's name
        return str(near) if near.exists() else data
    raise ConfigError(f"{path}: data: {near}: no such file (a data file is read relative to its TOML file)")
