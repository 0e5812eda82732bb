"""Writing exports: render a session in a format, and write files all or nothing.

Files are written to a temporary file in the target folder and then moved into place, so a
failed export never leaves a half-written file behind; a FIFO or a device (/dev/stdout) is written
into, never replaced (`write_atomically`).
"""

from __future__ import annotations

import json
import os
import re
import stat
import unicodedata
from pathlib import Path

from app.db_files import database_written_over
from app.export.dump import finite, session_dump, turns_of
from app.export.html_page import render_html
from app.export.markdown import render_conversation
from app.export.report import conversation_reports, dump_report
from app.file_replace import NoTemporaryFile, replace_text
from app.store import SessionStore
from engine.errors import BeamwiseError
from engine.text_cut import cut

FORMATS = ("md", "json", "html")
SUFFIXES = {"md": "md", "markdown": "md", "json": "json", "html": "html", "htm": "html"}  # a name's suffix: its format
WINDOWS_DEVICES = re.compile(r"(CON|PRN|AUX|NUL|CONIN\$|CONOUT\$|COM[0-9¹²³]|LPT[0-9¹²³]) *", re.IGNORECASE)


class ExportError(BeamwiseError):
    """The export file could not be written."""


def render_session(store: SessionStore, session_id: int, fmt: str) -> str:
    """The export text of one session in `fmt` (md, json or html)."""
    if fmt not in FORMATS:
        raise ValueError(f"export format must be one of {', '.join(FORMATS)} (got {fmt!r}).")
    reports, index = conversation_reports(store, session_id)  # one turn, or each turn of its conversation
    if fmt == "md":
        return render_conversation(reports, index)
    dump = session_dump(store, session_id)
    if fmt == "json":
        return json.dumps(finite(dump), indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    return render_html(dump_report(turns_of(dump)[index]), dump, reports, index)


def export_session(store: SessionStore, session_id: int, fmt: str, path: Path | str) -> Path:
    """Write one session to `path` in `fmt`; all or nothing. Returns the path written. A path that is a session
    database, this store's or the default one, or its -wal, -shm or -journal file is refused (app/db_files.py)."""
    path = Path(path)
    refuse_the_database(path, store.path)
    return write_atomically(path, render_session(store, session_id, fmt))


def refuse_the_database(path: Path, db: Path | str | None) -> None:
    """ExportError where `path` is the session database `db` (or the default one) or one of its files: asked before
    any other check of `path`, whose advice ("add --force") it would only refuse again."""
    if database_written_over(path, None if db is None else Path(db)) is not None:
        raise ExportError(f"cannot export to {path}: it is the session database itself; nothing was written.",
                          hint="Choose another file name, e.g. session.md.")


def format_of_name(path: Path | str) -> str | None:
    """The format a file name's suffix says (.md, .markdown, .json, .html, .htm, in any case), or None: the format
    asked for then (--format, the window's filter; Markdown when none was), and the name is written as typed
    (`-o s3.txt` and the window's s3.txt both hold Markdown)."""
    return SUFFIXES.get(Path(path).suffix.lower().lstrip("."))


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


def is_stream(path: Path | str) -> bool:
    """Whether `path` (through its links) is a FIFO or a character device (/dev/stdout, a terminal): written into
    as it is, never replaced (`write_atomically`); False when nothing is there or it cannot be read."""
    try:
        return _streams(os.stat(path).st_mode)
    except OSError:
        return False


def _streams(mode: int | None) -> bool:
    return mode is not None and (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode))


def write_atomically(path: Path, text: str, what: str | None = None) -> Path:
    """Write `text` to `path`, as a careful tool treats what is there already:

    - nothing, or a regular file: a temporary file next to it, then renamed over it, so readers never see half a
      file and a failed export leaves the old file whole; the new file keeps the old one's mode (a private file
      stays private, app/file_replace.py);
    - a symlink: the same at the file it points to; the link stays a link (it was replaced, its file left stale);
    - a FIFO or a character device (/dev/stdout, /dev/null, a terminal): written into directly, as a shell's `>`
      does, and a failed write (/dev/full's "No space left on device") is an error: the rename had replaced the
      device node itself with a plain file, /dev/null too when run as root, and "succeeded";
    - a block device, a socket or anything else: refused, untouched.

    `what` names a file that is no export ("the JSON"): its errors say "cannot write P" and "the JSON did not
    finish" where an export's say "cannot export to P" and "the export did not finish".
    """
    cannot = f"cannot export to {path}" if what is None else f"cannot write {path}"
    try:
        mode = os.stat(path).st_mode  # through every link, /dev/stdout's too
    except FileNotFoundError:  # a new file, or a link to one
        mode = None
    except OSError as error:
        raise ExportError(f"{cannot} ({error.strerror or error}); nothing was written.",
                          hint="Choose another file name, e.g. session.md.") from error
    if _streams(mode):
        return _write_into(path, text, what or "the export")
    if stat.S_ISDIR(mode or 0):
        raise ExportError(f"{cannot}: it is a folder.", hint="Give a file name, e.g. session.md.")
    if mode is not None and not stat.S_ISREG(mode):
        kind = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "no regular file"
        raise ExportError(f"{cannot}: it is {kind}; nothing was written.",
                          hint="Give a file name, e.g. session.md, or - for standard output.")
    _replace(Path(os.path.realpath(path)), path, text, cannot)
    return path


def _replace(target: Path, path: Path, text: str, cannot: str) -> None:
    """Write `text` over `target` whole (app/file_replace.py; `path` names it to the user: the link when `target`
    is a link's file; `cannot` begins the refusal of a missing folder: "cannot export to P")."""
    folder = target.parent
    if not folder.is_dir():
        raise ExportError(f"{cannot}: the folder {folder} does not exist.",
                          hint="Create the folder first or choose another one.")
    try:
        replace_text(target, text)
    except NoTemporaryFile as error:
        raise ExportError(f"cannot write to the folder {folder} ({error.strerror or error}).",
                          hint="Choose a folder you can write to, such as your Documents folder.") from error
    except OSError as error:
        raise ExportError(f"cannot write {path} ({error.strerror or error}); nothing was written.",
                          hint="Check free disk space and that the file is not open in another program.") from error


def _write_into(path: Path, text: str, what: str) -> Path:
    """Write `text` (`what` names it: "the export") into a FIFO or a character device as it is: there is no file
    to replace, so no temporary file either (and no O_CREAT: should the path change meanwhile, no plain file is
    made in its place)."""
    try:
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
    except OSError as error:
        raise ExportError(f"cannot write {path} ({error.strerror or error}); {what} did not finish.",
                          hint="Check that the device or the pipe's reader can take it, or write to a file.") from error
    return path
