"""The JSON a command writes beside its table (`bench --json`, `eval --json`): whole or not at all, and a path it
cannot write said before the work starts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from app.options import UsageError


def write_json(json_path: str | None, data: dict, announce: bool = True) -> None:
    """`data` written whole to a temporary file beside `json_path`, then moved over it: a reader (or a bench
    killed while writing) never leaves half a file."""
    if not json_path:
        return
    path = Path(json_path)

    def write(part: Path) -> None:
        part.write_text(json.dumps(data, indent=2), encoding="utf-8")
        part.replace(path)

    _beside(path, write)
    if announce:
        print(f"wrote {path}")


def check_json_path(json_path: str | None) -> None:
    """UsageError now when `json_path` cannot be written, without touching a file already there: the results of
    an earlier run stay whole until this run has its own to put in their place."""
    if not json_path:
        return
    path = Path(json_path)

    def probe(part: Path) -> None:
        part.write_text("", encoding="utf-8")
        part.unlink()
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory")

    _beside(path, probe)


def _beside(path: Path, write: Callable[[Path], None]) -> None:
    """`write(part)` with the scratch file beside `path`, its folder made first; a failure is one UsageError."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path.with_name(path.name + ".part"))
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror}; pick a writable --json path.") from error
