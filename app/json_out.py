"""The JSON a command writes beside its table (`bench --json`, `eval --json`): whole or not at all, and a path it
cannot write (or must not: the session database) said before the work starts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from app.db_files import database_part
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


def check_json_path(json_path: str | None, db: str | None = None) -> None:
    """UsageError now when `json_path` cannot be written, without touching a file already there: the results of
    an earlier run stay whole until this run has its own to put in their place. The session database (`db`, and
    the default one) is refused too, as `sessions export -o` refuses it."""
    refuse_the_database(json_path, db)
    if not json_path:
        return
    path = Path(json_path)

    def probe(part: Path) -> None:
        part.write_text("", encoding="utf-8")
        part.unlink()
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory")

    _beside(path, probe)


def refuse_the_database(json_path: str | None, db: str | None = None) -> None:
    """UsageError when `json_path` is a session database (`db` or the default one) or its -wal, -shm or -journal
    file: `eval --db s.db --json s.db` replaced every session in s.db with the results."""
    from app.store import default_db_path

    if not json_path:
        return
    path = Path(json_path)
    for base in (default_db_path(), *([Path(db).expanduser()] if db else [])):
        tail = database_part(path, base)
        if tail is not None:
            what = f"the {tail[1:]} file of the session database {base}" if tail else "the session database"
            raise UsageError(f"--json {path} is {what}; the results would replace every session in it. "
                             "Pick another --json path.")


def _beside(path: Path, write: Callable[[Path], None]) -> None:
    """`write(part)` with the scratch file beside `path`, its folder made first; a failure is one UsageError."""
    try:
        blocker = next((folder for folder in path.parents if folder.exists() and not folder.is_dir()), None)
        if blocker is not None:  # mkdir said "File exists", which read as if the JSON file were the trouble
            raise UsageError(f"cannot write {path}: {blocker} is a file, not a folder; pick a writable --json path.")
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path.with_name(path.name + ".part"))
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror}; pick a writable --json path.") from error
