"""Writing exports: render a session in a format, and write files all or nothing.

Files are written to a temporary file in the target folder and then moved into place, so a
failed export never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import unicodedata
from pathlib import Path

from app.db_files import database_part
from app.export.dump import finite, session_dump, turns_of
from app.export.html_page import render_html
from app.export.markdown import render_conversation
from app.export.report import conversation_reports, dump_report
from app.store import SessionStore
from engine.errors import BeamwiseError
from engine.text_cut import cut

FORMATS = ("md", "json", "html")
WINDOWS_DEVICES = re.compile(r"(CON|PRN|AUX|NUL|CONIN\$|CONOUT\$|COM[0-9¹²³]|LPT[0-9¹²³]) *", re.IGNORECASE)


class ExportError(BeamwiseError):
    """The export file could not be written."""


def render_session(store: SessionStore, session_id: int, fmt: str) -> str:
    """The export text of one session in `fmt` (md, json or html)."""
    if fmt not in FORMATS:
        raise ValueError(f"export format must be one of {', '.join(FORMATS)} (got {fmt!r}).")
    reports, index = conversation_reports(store, session_id)  # one turn, or each turn of its conversation
    if fmt == "md":
        return render_conversation(reports)
    dump = session_dump(store, session_id)
    if fmt == "json":
        return json.dumps(finite(dump), indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    return render_html(dump_report(turns_of(dump)[index]), dump, reports, index)


def export_session(store: SessionStore, session_id: int, fmt: str, path: Path | str) -> Path:
    """Write one session to `path` in `fmt`; all or nothing. Returns the path written."""
    refuse_the_database(store, Path(path))
    return write_atomically(Path(path), render_session(store, session_id, fmt))


def refuse_the_database(store: SessionStore, path: Path) -> None:
    """An export over the session database (or its -wal, -shm or -journal file) would replace every session with
    one session's text: `sessions export 1 -o sessions.db --force` did."""
    if store.path is None:
        return
    if database_part(path, store.path) is not None:
        raise ExportError(f"cannot export to {path}: it is the session database itself; nothing was written.",
                          hint="Choose another file name, e.g. session.md.")


def default_file_stem(title: str) -> str:
    """A file name (without its suffix) for an export of the session `title`, valid on every system, Windows too:
    letters with their accents and vowel signs, digits, spaces, '-' and '_' only (never <>:"/\\|?*, a dot, a
    control or direction character; a run of others is one '_'), at most 60 characters and 120 bytes of UTF-8
    (60 letters of some scripts are 240 bytes: Linux holds 255 bytes a name, an encrypted eCryptfs home 143, and
    the suffix adds to it), not cut inside a letter, and not a device name (CON, NUL, COM1, LPT¹, ...: Windows
    opens the device, whatever the suffix)."""
    kept = "".join(ch if ch in " -_" or unicodedata.category(ch)[0] in "LNM" else "_"
                   for ch in unicodedata.normalize("NFC", title))  # NFC: an accent written apart joins its letter
    stem = _within_bytes(cut(re.sub("_+", "_", kept).strip(" _"), 60), 120).strip(" _") or "session"
    return f"{stem}_" if WINDOWS_DEVICES.fullmatch(stem) else stem


def _within_bytes(text: str, most: int) -> str:
    """`text` cut between letters (engine/text_cut.py) to at most `most` bytes of UTF-8."""
    while len(text.encode("utf-8")) > most:
        text = cut(text, len(text) - 1)
    return text


def write_atomically(path: Path, text: str) -> Path:
    """Write to a temporary file next to `path`, then replace: readers never see half a file."""
    folder = path.parent
    if path.is_dir():
        raise ExportError(f"cannot export to {path}: it is a folder.", hint="Give a file name, e.g. session.md.")
    if not folder.is_dir():
        raise ExportError(f"cannot export to {path}: the folder {folder} does not exist.",
                          hint="Create the folder first or choose another one.")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{_within_bytes(path.name, 100)}.", suffix=".part", dir=folder)
    except OSError as error:
        raise ExportError(f"cannot write to the folder {folder} ({error.strerror or error}).",
                          hint="Choose a folder you can write to, such as your Documents folder.") from error
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        if os.name != "nt":
            tmp.chmod(0o644)
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise ExportError(f"cannot write {path} ({error.strerror or error}); nothing was written.",
                          hint="Check free disk space and that the file is not open in another program.") from error
    return path
