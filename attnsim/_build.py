"""PEP 517 build backend: setuptools, plus the source revision written into
the package (``attnsim/_revision.py``) so an installed copy can say which
commit it was built from (result files record it). Only the standard library
and setuptools are imported here."""

from __future__ import annotations

import subprocess
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - the rest of the backend interface

_ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _record_revision() -> None:
    """Write the checkout's revision into the package; keep an earlier record
    (an sdist unpacked outside git) when there is no git checkout."""
    target = _ROOT / "attnsim" / "_revision.py"
    rev = _git("rev-parse", "HEAD") if (_ROOT / ".git").exists() else None
    if rev is None:
        return
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    target.write_text(
        '"""Written by attnsim/_build.py when the package was built."""\n\n'
        f"REVISION = {rev!r}\nDIRTY = {dirty!r}\n"
    )


def build_wheel(
    wheel_directory: str, config_settings: dict | None = None, metadata_directory: str | None = None
) -> str:
    _record_revision()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(
    wheel_directory: str, config_settings: dict | None = None, metadata_directory: str | None = None
) -> str:
    _record_revision()
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory: str, config_settings: dict | None = None) -> str:
    _record_revision()
    return _setuptools.build_sdist(sdist_directory, config_settings)
