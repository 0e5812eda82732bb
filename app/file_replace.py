"""A file written whole: a temporary file beside it, renamed over it, so a reader finds the old file or the new one."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

NEW_FILE_MODE = 0o644  # a file made here: readable by all, as a program's files are; mkstemp's 600 would hide it


class NoTemporaryFile(OSError):
    """The folder took no new file (read-only, missing, full): nothing was written, the old file is whole."""


def replace_text(target: Path, text: str) -> None:
    """Write `text` (UTF-8, '\\n' line ends) to `target` through a temporary file of a name no other writer uses,
    in `target`'s folder, renamed over `target`: a reader, or a crash, finds the old file or the new one, never
    half of either, and two writers at once (the window and a command) never write into one temporary file.
    The new file keeps the mode of the file it replaces, as a shell's `>` does (a file made private, 600, stays
    private: the rename used to leave it 644, readable by everyone); a new file is 644.
    NoTemporaryFile when the folder takes no new file; another OSError when writing or the rename fails.
    Either way the temporary file is gone and `target` is as it was."""
    folder = target.parent
    stem = target.name.encode("utf-8")[:100].decode("utf-8", "ignore")  # a name near 255 bytes stays a legal name
    mode = kept_mode(target)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{stem}.", suffix=".part", dir=folder)
    except OSError as error:
        raise NoTemporaryFile(error.errno, error.strerror, str(folder)) from error
    temporary = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        if os.name != "nt":  # Windows has no such modes (its read-only flag would only block the rename)
            temporary.chmod(mode)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def kept_mode(target: Path) -> int:
    """The permission bits the file replacing `target` gets: those of the regular file there now (through a link),
    else NEW_FILE_MODE."""
    try:
        now = os.stat(target).st_mode
    except OSError:  # nothing there (or unreadable: the write then says why)
        return NEW_FILE_MODE
    # not set-user-ID, set-group-ID or sticky: writing into a file clears the first two, so `>` keeps none either
    return stat.S_IMODE(now) & 0o777 if stat.S_ISREG(now) else NEW_FILE_MODE
