"""Which file of a session database a path is: an export or a JSON written there would replace every session."""

from __future__ import annotations

import os
from pathlib import Path

from app.db_path import default_db_path

TAILS = ("", "-wal", "-shm", "-journal")  # the database and the files SQLite keeps beside it


def database_written_over(path: Path, db: Path | None = None) -> tuple[Path, str] | None:
    """The session database that a file written at `path` would replace, `db` or the default one, with the tail
    of the file `path` is (as `database_part` says); None when it is none of their files. `sessions export -o
    sessions.db --force` and `eval --db s.db --json s.db` replaced every session with one file's text: each caller
    refuses with its own error."""
    for base in (*([db] if db is not None else []), default_db_path()):
        tail = database_part(path, base)
        if tail is not None:
            return base, tail
    return None


def database_part(path: Path, db: Path) -> str | None:
    """The tail of the file of database `db` that `path` is ("" for the database itself, "-wal", "-shm",
    "-journal"), by name or as one file by two names; None when it is none of them."""
    return next((tail for tail in TAILS if _same_file(path, db.with_name(db.name + tail))), None)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False
