"""The session database as a file: whether SQLite finds it whole, whether this Beamwise can use its schema, and
moving a damaged one aside. All of it reads the file only (or renames it): no `SessionStore` is opened on it."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from app.db_kind import foreign_file
from app.db_path import is_default
from app.migrations import table_names, unusable_schema
from app.store_errors import NotADatabase, StoreError, StoreLocked, StoreReadOnly, StoreUnreadable

DEFAULT_BUSY_TIMEOUT = 5.0  # seconds a write waits for another program's lock
FULL_BELOW = 1 << 20  # bytes free on the database's disk under which SQLite's "disk I/O error" is a full disk


def damage(path: Path | str, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> str | None:
    """What SQLite finds wrong with the database file at `path` (its header, then every page), or None when it
    is whole; read only. A file another program holds locked is `StoreLocked`, one that cannot be opened to be
    read (its permissions, a program holding it open) `StoreUnreadable`: neither is damage, to be moved aside."""
    try:
        with reading(Path(path), busy_timeout) as conn:
            return quick_check(conn)
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
        with reading(Path(path), busy_timeout) as conn:
            return unusable_schema(conn, Path(path), table_names(conn))
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
    sides = list(zip(side_files(path), side_files(target), strict=True))
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


def full_disk(path: Path, error: sqlite3.Error) -> bool:
    """Whether SQLite's `error` on the database at `path` comes from a full disk: "database or disk is full"
    (SQLITE_FULL), or a "disk I/O error" while its folder's disk has under `FULL_BELOW` bytes free. SQLite says the
    latter where it cannot make or grow the WAL's index (the -shm file, SQLITE_IOERR_SHMSIZE), which every opening
    of a WAL database needs: every command, the run too, was refused as if the file could not be used at all."""
    text = str(error).lower()
    if "disk is full" in text:
        return True
    if "disk i/o error" not in text:
        return False
    free = free_bytes(path)
    return free is not None and free < FULL_BELOW  # a disk that cannot be asked: a real I/O error, said as such


def has_room(path: Path) -> bool:
    """Whether the disk under the database at `path` has `FULL_BELOW` bytes free, room to open it for writing."""
    free = free_bytes(path)
    return free is not None and free >= FULL_BELOW


def free_bytes(path: Path) -> int | None:
    """The bytes free on the disk under the database at `path`; None when its folder cannot be asked."""
    try:
        return shutil.disk_usage(path.parent).free
    except OSError:
        return None


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
    (SQLite then skips the checkpoint), and being read-only never checkpoints when it closes itself. An empty WAL
    has nothing to copy: then `conn` closes as any other, so that the -wal and -shm files the read made (a damaged
    file that had none) go with it, as SQLite's last connection deletes them."""
    if wal_is_empty(path):
        conn.close()
        return
    keeper = None
    with contextlib.suppress(sqlite3.Error):
        keeper = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)
        keeper.execute("PRAGMA user_version").fetchone()  # a read: it takes its lock on the file (and WAL)
    try:
        conn.close()
    finally:
        if keeper is not None:
            keeper.close()


def wal_is_empty(path: Path) -> bool:
    """Whether the WAL beside `path` holds no page to copy into the file: there is none, or it is 0 bytes long."""
    try:
        return side_file(path, "-wal").stat().st_size == 0
    except FileNotFoundError:
        return True
    except OSError:
        return False


def side_file(path: Path, tail: str) -> Path:
    """The file SQLite keeps beside the database at `path` ("-wal", "-shm")."""
    return path.with_name(path.name + tail)


def side_files(path: Path) -> tuple[Path, Path]:
    """The database's -wal and -shm files."""
    return side_file(path, "-wal"), side_file(path, "-shm")


@contextlib.contextmanager
def reading(path: Path, timeout: float) -> Iterator[sqlite3.Connection]:
    """A read-only connection for one look at the file, closed with the side files it made (`close_read_only`)."""
    made = absent_side_files(path)
    conn = connect_read_only(path, timeout)
    try:
        yield conn
    finally:
        close_read_only(conn, path, made)


def connect_read_only(path: Path, timeout: float) -> sqlite3.Connection:
    """Read-only; a WAL database whose folder forbids the -shm file is read as immutable (no locks). Close it with
    `close_read_only`, which removes the side files this connection made. One that cannot be read (a malformed
    file fails the first read) raises with nothing left open and no side file made (`first_read`)."""
    uri = path.resolve().as_uri()
    made = absent_side_files(path)
    try:
        return first_read(sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=timeout, check_same_thread=False))
    except sqlite3.OperationalError:
        return sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=timeout, check_same_thread=False)
    except BaseException:
        remove_side_files(path, made)
        raise


def first_read(conn: sqlite3.Connection) -> sqlite3.Connection:
    """`conn` once it has read the schema, closed where that read fails: a malformed file raised a plain
    DatabaseError there, and its connection stayed open, and the -wal and -shm files it made stayed beside the file
    (`sessions move-aside` carried them along), which a read must never leave (README)."""
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


def absent_side_files(path: Path) -> list[Path]:
    """The -wal and -shm files not beside the database at `path` now: those a read-only connection opened next
    makes, for `close_read_only` to take away."""
    return [side for side in side_files(path) if not side.exists()]


def close_read_only(conn: sqlite3.Connection, path: Path, made: list[Path]) -> None:
    """Close a read-only connection and remove the side files it `made` (`absent_side_files` before it opened),
    while its WAL holds nothing. To read a WAL database SQLite makes its -wal and -shm files beside it, and a
    read-only connection never deletes them: made with the file's mode, those of a read-only file stayed read-only
    and kept every write out once the file itself was made writable. (Reading such a file as immutable made none,
    but a connection kept open, as the window keeps one, then read a file changed under it as damaged.)"""
    conn.close()
    remove_side_files(path, made)


def remove_side_files(path: Path, made: list[Path]) -> None:
    """Remove the side files of the database at `path` that a closed read-only connection `made`, while its WAL
    holds nothing (a WAL holding sessions is another connection's, kept)."""
    if not made or not wal_is_empty(path):
        return
    for side in made:
        with contextlib.suppress(OSError):
            side.unlink(missing_ok=True)


def stale_side_files(path: Path) -> list[Path]:
    """The -wal and -shm files beside the database at `path` that cannot be written while the file and its folder
    can: left read-only by an earlier read of the file when it was read-only, they keep every write out."""
    if not writable(path):
        return []
    return [side for side in side_files(path) if side.exists() and not os.access(side, os.W_OK)]


def read_only_parts(path: Path) -> str:
    """What keeps writes out of the database at `path`, named as the user makes it writable: the -wal or -shm files
    an earlier read left read-only, else the file or its folder (SQLite writes beside the file)."""
    return _parts_said(path, read_only_names(path))


def _parts_said(path: Path, names: list[str]) -> str:
    """`read_only_names` as one phrase; both the file and its folder where neither looks read-only."""
    return " and ".join(names) or f"the file {path} and its folder {path.parent}"


def read_only_names(path: Path) -> list[str]:
    """`read_only_parts` one by one; none where nothing looks read-only (to root, every file is writable)."""
    if stale := stale_side_files(path):
        return [str(side) for side in stale]
    names = []
    if not os.access(path, os.W_OK):
        names.append(f"the file {path}")
    if not os.access(path.parent, os.W_OK):
        names.append(f"the folder {path.parent}")
    return names


def read_only_refusal(path: Path, lead: str = "can only be read:", outcome: str = "nothing was written"
                      ) -> StoreReadOnly:
    """The refusal of a write to the database at `path` that cannot be written, naming the part that keeps it out
    as the run's journal warning does (`read_only_parts`): it said "the folder ... or the file is read-only" and
    "Make the folder writable" where only the file was read-only. `lead`: the sentence's words before that part."""
    if stale := stale_side_files(path):
        return stale_refusal(path, stale)
    names = read_only_names(path)  # the file, its folder, or neither (the side files were looked at just above)
    which = (f"{' and '.join(names)} {'are' if len(names) > 1 else 'is'}" if names else
             f"the file {path} or the folder {path.parent} is")  # neither looks read-only: the user checks both
    return StoreReadOnly(f"the session database {path} {lead} {which} read-only; {outcome}.",
                         hint=f"Make {_parts_said(path, names)} writable, then try again; or pass --db with a "
                              "database you can write to.")


def stale_refusal(path: Path, stale: list[Path]) -> StoreReadOnly:
    """The refusal of a write that `stale_side_files` kept out: the file and its folder are writable, so naming them
    (as a read-only database's refusal does) sent the user to change what was already right."""
    names = " and ".join(str(side) for side in stale)
    them = "it" if len(stale) == 1 else "them"
    if wal_is_empty(path):
        how = (f"Delete {them} while no Beamwise or other program has the database open, or make {them} writable; "
               "then try again.")
    else:
        how = (f"Make {them} writable, then try again ({side_file(path, '-wal').name} holds sessions not yet in "
               "the file: do not delete it).")
    return StoreReadOnly(f"the session database {path} can only be read: {names} beside it "
                         f"{'is' if len(stale) == 1 else 'are'} read-only, left by a read while the database was "
                         "read-only; nothing was written.", hint=how)
