"""Beamwise's version, and the libraries' a bug report needs, read from the installed metadata (nothing imported)."""

from __future__ import annotations

import platform
from importlib import metadata

LIBRARIES = ("torch", "transformers", "PySide6-Essentials")


def version(distribution: str = "beamwise") -> str:
    """The installed version of `distribution`, or "not installed"."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def version_line() -> str:
    """`beamwise 0.1.0 (torch 2.13.0, transformers 5.24.0, PySide6-Essentials 6.10.1, Python 3.11.7)`."""
    libraries = ", ".join(f"{name} {version(name)}" for name in LIBRARIES)
    return f"beamwise {version()} ({libraries}, Python {platform.python_version()})"
