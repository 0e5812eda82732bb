"""A word of a command line Beamwise prints for the user to run again (a follow-up, a resumed pull), quoted for the
shells of the system it runs on: POSIX quotes on Linux and macOS; on Windows double quotes, which cmd.exe and
PowerShell both read (cmd kept POSIX's single quotes as part of a path, `'C:\\Users\\me\\my.db'`, so the printed
command failed there)."""

from __future__ import annotations

import os
import re
import shlex

ON_WINDOWS = os.name == "nt"
PLAIN_ON_WINDOWS = re.compile(r"[\w+=:./\\-]+")  # one word unquoted to cmd and PowerShell (PowerShell splits at ",")


def quoted(word: str, windows: bool | None = None) -> str:
    """`word` as one word of a command line, quoted only where it must be. `windows`: the Windows form (default: on
    Windows). A `"` inside is doubled, as cmd and PowerShell both read it."""
    if not (ON_WINDOWS if windows is None else windows):
        return shlex.quote(word)
    return word if PLAIN_ON_WINDOWS.fullmatch(word) else '"' + word.replace('"', '""') + '"'
