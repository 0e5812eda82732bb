"""Where the session database is (the data folder's sessions.db, or --db), and whether the folder named for it
can hold it: a missing folder, a file or a broken link where a folder should be is said, never made."""

from __future__ import annotations

import os
from pathlib import Path

from app.models_folder import data_folder
from app.path_names import shown_path, too_long
from app.shell_words import quoted
from app.store_errors import StoreError

DB_NAME = "sessions.db"
SIDE_TAIL = "-journal"  # the longest tail of the files SQLite keeps beside a database (app/db_files.py TAILS)


def default_db_path() -> Path:
    """sessions.db in the data folder (app/models_folder.py `data_folder`)."""
    return data_folder() / DB_NAME


def db_file(path: Path | str | None) -> Path:
    """The session database `path` names (`--db`; None: the default one), refused with a StoreError when the file
    system cannot hold its name: every later look at it (exists, is_file) raised OSError, a traceback. The files
    SQLite keeps beside it (NAME-journal, the longest) must fit too: a 250-byte name was made, then refused by SQLite
    as "unable to open database file"."""
    if path is not None and not str(path).strip():  # Path("") is ".", said to be a folder: callers pass --db's text
        raise StoreError("--db is empty: give a session database file, such as sessions.db, or leave --db out for "
                         "the default one.")
    where = Path(path) if path is not None else default_db_path()
    why = too_long(where)
    if why is None and where.name and too_long(where.with_name(where.name + SIDE_TAIL)) is not None:
        why = (f"its file name is {len(os.fsencode(where.name))} bytes long, and with the {SIDE_TAIL!r} SQLite adds "
               "for the files beside it, more than the file system allows")
    if why is None:
        return where
    hint = ("Set BEAMWISE_DATA_DIR to a folder with a shorter path." if path is None else
            "Choose a shorter file name (and folder names) for --db.")
    raise StoreError(f"cannot use {shown_path(where)} as the session database: {why}; nothing was read or made.",
                     hint=hint)


def is_default(path: Path) -> bool:
    """Whether `path` is the default session database (a file Beamwise made, never one the user named)."""
    try:
        return path.resolve() == default_db_path().resolve()
    except OSError:
        return False


def db_option(path: Path | str | None) -> str:
    """` --db PATH` (quoted for a shell) that names the database at `path` in a command to run, or "" for the
    default database (and a private in-memory one, or no --db given: `None`)."""
    return "" if path is None or is_default(Path(path)) else f" --db {quoted(str(path))}"


def check_folder(path: Path) -> None:
    """Refuse a session database whose folder is missing, or is a file or a link to a missing folder: an explicit
    --db with a typo in its folder made that folder tree and a new database in it, and a file or a broken link where
    a folder should be read "[Errno 17] File exists". Only the default database's folder (the data folder) is made
    when missing."""
    try:
        if path.parent.is_dir():
            return
        nearest = nearest_there(path.parent)[1]
        blocked = nearest is not None and not nearest.is_dir()
        broken = blocked and not nearest.exists()
    except OSError:  # a folder on the way cannot be read: SQLite says why when it opens the file
        return
    if broken:
        hint = ("Create the folder it points to, remove the link, or set BEAMWISE_DATA_DIR to another folder."
                if is_default(path) else "Create the folder it points to, or check the --db path.")
        raise StoreError(f"cannot open the session database {path}: {nearest} is a link to a missing folder "
                         f"({_link_target(nearest)}); nothing was made.", hint=hint)
    if blocked:
        hint = ("Move that file away, or set BEAMWISE_DATA_DIR to another folder." if is_default(path) else
                "Check the --db path, or choose a file in another folder.")
        raise StoreError(f"cannot open the session database {path}: {nearest} is a file, not a folder; nothing "
                         "was made.", hint=hint)
    if not is_default(path):
        raise StoreError(f"cannot open the session database {path}: the folder {path.parent} does not exist; "
                         "nothing was made.", hint="Create the folder first or choose another one (check the --db "
                                                   "path for a typo).")


def nearest_there(folder: Path) -> tuple[list[Path], Path | None]:
    """The folders from `folder` up that are not there, deepest first (what opening a database in `folder` makes),
    and the nearest that is: a folder, a file, or a link (whose target may be missing); None when not even the
    root is. A folder on the way that cannot be read raises OSError."""
    missing = []
    for step in [folder, *folder.parents]:
        if step.is_symlink() or step.exists():
            return missing, step
        missing.append(step)
    return missing, None


def _link_target(link: Path) -> str:
    try:
        return os.readlink(link)
    except OSError:
        return "unreadable"
