"""The JSON a command writes beside its table (`bench --json`, `eval --json`): whole or not at all, and a path it
cannot write (or must not: the session database) said before the work starts."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from app.db_files import database_written_over
from app.options import UsageError


def write_json(json_path: str | None, data: dict, announce: bool = True) -> None:
    """`data` written whole, as `sessions export` writes (app/export/files.py `write_atomically`): over a file by a
    temporary file renamed over it, so a reader (or a bench killed while writing) never sees half a file; through a
    symlink to the file it names, the link kept; into a FIFO or a character device (/dev/stdout) as it is, never
    replacing it (as root, /dev/null became a plain file); anything else refused, untouched."""
    if not json_path:
        return
    from app.export.files import ExportError, write_atomically

    path = Path(json_path)

    def write() -> None:
        try:
            write_atomically(path, json.dumps(data, indent=2), what="the JSON")
        except ExportError as error:  # its words without its hint, which names an export's session.md
            raise UsageError(f"{error} Pick a writable --json path (a file, a FIFO or /dev/stdout).") from error

    _in_folder(path, write)
    if announce:
        print(f"wrote {path}")


def is_stream(json_path: str | None) -> bool:
    """True when `json_path` is a FIFO or a character device (/dev/stdout, a terminal): what is written there goes
    to a reader as it comes, so it is written once, whole, never after every row (a FIFO's reader would take the
    first, partial report and go; a terminal would show every version)."""
    from app.export.files import is_stream as streams

    return bool(json_path) and streams(json_path)


def check_json_path(json_path: str | None, db: str | None = None) -> None:
    """UsageError now when `json_path` cannot be written, without touching a file already there: the results of
    an earlier run stay whole until this run has its own to put in their place. The session database (`db`, and
    the default one) is refused too, as `sessions export -o` refuses it, and so is an empty path (`--json ""` wrote
    nothing and exited 0). A FIFO or a device is written into as it is: nothing is probed beside it (/dev)."""
    if json_path is not None and not json_path:
        raise UsageError('--json needs a file name (got ""); give a path such as results.json, or leave --json out.')
    refuse_the_database(json_path, db)
    if not json_path or is_stream(json_path):
        return
    path = Path(json_path)

    def probe() -> None:
        part = path.with_name(path.name + ".part")
        part.write_text("", encoding="utf-8")
        part.unlink()
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory")
        if path.exists() and not path.is_file():  # a socket, a block device: refused now, not after the first row
            raise UsageError(f"cannot write {path}: it is {_kind(path)}; nothing was written. Pick a writable --json "
                             "path (a file, a FIFO or /dev/stdout).")
        if path.is_file() and not os.access(path, os.W_OK):  # immutable (chattr +i: even root's replace fails) or
            # read-only: the probe beside it passed, and the bench died at its first row's write
            raise UsageError(f"cannot write {path}: the file there is read-only; nothing was written. Make it "
                             "writable, or pick another --json path.")

    _in_folder(path, probe)


def _kind(path: Path) -> str:
    if path.is_socket():
        return "a socket"
    return "a block device" if path.is_block_device() else "no regular file"


def refuse_the_database(json_path: str | None, db: str | None = None) -> None:
    """UsageError when `json_path` is a session database (`db`, opened as the store opens it, or the default one)
    or its -wal, -shm or -journal file (app/db_files.py): `eval --db s.db --json s.db` replaced every session in
    s.db with the results."""
    if not json_path:
        return
    path = Path(json_path)
    found = database_written_over(path, Path(db) if db else None)
    if found is not None:
        base, tail = found
        what = f"the {tail[1:]} file of the session database {base}" if tail else "the session database"
        raise UsageError(f"--json {path} is {what}; the results would replace every session in it. "
                         "Pick another --json path.")


def _in_folder(path: Path, write: Callable[[], None]) -> None:
    """`write()` once `path`'s folder is there (made first); an OSError is one UsageError."""
    try:
        blocker = next((folder for folder in path.parents if folder.exists() and not folder.is_dir()), None)
        if blocker is not None:  # mkdir said "File exists", which read as if the JSON file were the trouble
            raise UsageError(f"cannot write {path}: {blocker} is a file, not a folder; pick a writable --json path.")
        path.parent.mkdir(parents=True, exist_ok=True)
        write()
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror}; pick a writable --json path.") from error
