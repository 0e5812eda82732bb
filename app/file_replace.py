"""A file written whole: a temporary file beside it, renamed over it, so a reader finds the old file or the new one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class NoTemporaryFile(OSError):
    """The folder took no new file (read-only, missing, full): nothing was written, the old file is whole."""


def replace_text(target: Path, text: str) -> None:
    """Write `text` (UTF-8, '\\n' line ends, mode 644) to `target` through a temporary file of a name no other
    writer uses, in `target`'s folder, renamed over `target`: a reader, or a crash, finds the old file or the new
    one, never half of either, and two writers at once (the window and a command) never write into one temporary
    file. NoTemporaryFile when the folder takes no new file; another OSError when writing or the rename fails.
    Either way the temporary file is gone and `target` is as it was."""
    folder = target.parent
    stem = target.name.encode("utf-8")[:100].decode("utf-8", "ignore")  # a name near 255 bytes stays a legal name
    try:
        fd, name = tempfile.mkstemp(prefix=f".{stem}.", suffix=".part", dir=folder)
    except OSError as error:
        raise NoTemporaryFile(error.errno, error.strerror, str(folder)) from error
    temporary = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        if os.name != "nt":
            temporary.chmod(0o644)  # mkstemp's 600 would hide the file from other users
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
