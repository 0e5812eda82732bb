"""The session database as a file: whether SQLite finds it whole, whether this Beamwise can use its schema, and
moving a damaged one aside. All of it reads the file only (or renames it): no `SessionStore` is opened on it."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path

from app.db_kind import foreign_file
from app.db_path import is_default
from app.migrations import table_names, unusable_schema
from app.store_errors import NotADatabase, StoreError, StoreLocked, StoreUnreadable

DEFAULT_BUSY_TIMEOUT = 5.0  # seconds a write waits for another program's lock


def damage(path: Path | str, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> str | None:
    """What SQLite finds wrong with the database file at `path` (its header, then every page), or None when it
    is whole; read only. A file another program holds locked is `StoreLocked`, one that cannot be opened to be
    read (its permissions, a program holding it open) `StoreUnreadable`: neither is damage, to be moved aside."""
    try:
        conn = connect_read_only(Path(path), busy_timeout)
        try:
            return quick_check(conn)
        finally:
            conn.close()
    except sqlite3.DatabaseError as error:
        text = str(error).lower()
        if "locked" in text or "busy" in text:
            raise StoreLocked(f"the session database {path} is busy: another program or Beamwise process holds "
                              "its lock; nothing was moved.") from error
        if isinstance(error, sqlite3.OperationalError) and "malformed" not in text:
            raise unreadable(Path(path), error, "nothing was moved") from error
        return str(error)

def schema_refusal(path: Path | str, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> StoreError | None:
    """Why a whole SQLite file at `path` cannot be opened as this Beamwise's session database (a newer
    Beamwise's schema, another program's tables), or None; read only. `move-aside` says it before calling such a
    file "not damaged" and pointing at `sessions list`, which would refuse it."""
    try:
        conn = connect_read_only(Path(path), busy_timeout)
        try:
            return unusable_schema(conn, Path(path), table_names(conn))
        finally:
            conn.close()
    except sqlite3.DatabaseError:  # busy or damaged: `damage` says so
        return None

def move_aside(path: Path | str) -> Path:
    """Rename a damaged database (and its -wal/-shm files) to NAME.damaged-YYYYmmdd-HHMMSS; never deletes. A
    file that is no SQLite database (notes.md, an export given as --db) is refused: it is not damaged; at the
    default database's path, a file Beamwise made, anything is damage."""
    path = Path(path)
    if not path.exists():
        raise StoreError(f"there is no file {path} to move aside.")
    if (looks := foreign_file(path)) is not None and not is_default(path):
        raise NotADatabase(f"{path} is not a session database (it holds {looks}, not SQLite data); nothing "
                           "was moved.", hint="Check the --db path; move-aside renames only a damaged database.")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    # The side files first, the database last: a database moved without its WAL left that WAL beside the
    # next, fresh database. A failed rename moves back what had moved.
    sides = [(path.with_name(path.name + end), target.with_name(target.name + end)) for end in ("-wal", "-shm")]
    moves = [*((side, dest) for side, dest in sides if side.exists()), (path, target)]
    moved: list[tuple[Path, Path]] = []
    try:
        for source, dest in moves:
            source.rename(dest)
            moved.append((source, dest))
    except OSError as error:
        raise StoreError(f"cannot move {path} aside: {error.strerror or error}; {_move_back(moved)}.",
                         hint=f"Check that the folder {path.parent} is writable, or move the files yourself."
                         ) from error
    return target


def _move_back(moved: list[tuple[Path, Path]]) -> str:
    """Undo a move-aside's renames, last first; says what is left where."""
    stuck = []
    for source, dest in reversed(moved):
        try:
            dest.rename(source)
        except OSError:
            stuck.append(f"{source.name} stays moved to {dest.name}")
    return "; ".join(stuck) if stuck else "nothing was moved"


def unreadable(path: Path, error: sqlite3.Error, outcome: str) -> StoreUnreadable:
    """A file SQLite cannot open to read ("unable to open database file": permission denied, or on Windows a file
    another program holds open): it was called damaged, and move-aside moved a healthy database away."""
    return StoreUnreadable(f"cannot read the session database {path} ({error}); {outcome}.")


def writable(path: Path) -> bool:
    """SQLite writes beside the file (-wal, -shm): the file and its folder must both be writable."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def quick_check(conn: sqlite3.Connection) -> str | None:
    """SQLite's first complaint after reading every page, or None when the file is whole."""
    found = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
    # e.g. "*** in database main ***\nOn tree page 28 cell 3: Extends off end of page"
    return None if found == "ok" else found.splitlines()[-1]


def close_keeping_wal(conn: sqlite3.Connection, path: Path) -> None:
    """Close `conn`, a connection that may write the database at `path`, without copying its WAL into the file.

    The last connection to a WAL database to close checkpoints it (copies the WAL's pages into the file) and deletes
    the WAL: after a read found the file damaged, that wrote the newest sessions over it, and `move-aside` kept
    neither them nor the file as it was. A read-only connection opened beside it and closed after it holds the file
    (SQLite then skips the checkpoint), and being read-only never checkpoints when it closes itself."""
    keeper = None
    with contextlib.suppress(sqlite3.Error):
        keeper = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)
        keeper.execute("PRAGMA user_version").fetchone()  # a read: it takes its lock on the file (and WAL)
    try:
        conn.close()
    finally:
        if keeper is not None:
            keeper.close()


def connect_read_only(path: Path, timeout: float) -> sqlite3.Connection:
    """Read-only; a WAL database whose folder forbids the -shm file is read as immutable (no locks)."""
    uri = path.resolve().as_uri()
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=timeout, check_same_thread=False)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:
        return sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=timeout, check_same_thread=False)
