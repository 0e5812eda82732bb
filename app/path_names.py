"""Whether the file system can hold a path the user gave: a name too long for it is said in words, never a traceback."""

from __future__ import annotations

import errno
import os
from pathlib import Path

NAME_MAX = 255  # bytes in one file or folder name on the usual file systems (ext4, NTFS, APFS)
SHOWN = 48  # characters of a long name shown in a message: its start and its end


def too_long(path: Path) -> str | None:
    """What makes `path` too long for the file system ("its file name is 303 bytes long, ..."), or None.

    Python 3.11's Path.exists, is_file and is_dir raise OSError (ENAMETOOLONG) on such a path instead of answering,
    so a path the user gives is asked about here once, where it is first taken; the file system itself answers (as
    lstat), so a file system with other limits is judged by its own."""
    try:
        os.lstat(path)
        return None
    except ValueError:  # a NUL in the path: whoever opens it says so
        return None
    except OSError as error:
        if error.errno != errno.ENAMETOOLONG:  # not there, or a folder on the way cannot be read: not its length
            return None
    longest = max(path.parts, key=lambda part: len(os.fsencode(part)), default="")
    size = len(os.fsencode(longest))
    if size <= NAME_MAX:
        return f"the path is {len(os.fsencode(str(path)))} bytes long, more than the file system allows"
    which = "its file name" if longest == path.name else f"the folder name {shown_name(longest)} in it"
    return f"{which} is {size} bytes long, more than the file system allows ({NAME_MAX} bytes on most)"


def shown_name(name: str) -> str:
    """A name cut for a message: its start and its end (the suffix shows) around '…' when it is long."""
    return name if len(name) <= SHOWN else f"{name[:SHOWN - 12]}…{name[-11:]}"


def shown_path(path: Path) -> str:
    """`path` for a message, each long name in it cut (`shown_name`): a 300-letter name made the line unreadable."""
    return str(Path(*(shown_name(part) for part in path.parts))) if path.parts else str(path)
