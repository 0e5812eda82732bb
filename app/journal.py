"""Run journals: one JSON Lines file per run that could not reach its session database, flushed per step.

A journal is written when the database is busy (another program holds its write lock) or
cannot be written. Its first line names the database and the run; every later line is one
engine event with its time since the run started; a last `{"closed": true}` line says the
writer let go of it. `app.journal_import` replays journals into the database the next time
the database is opened, and deletes each one only after its session committed.
"""

from __future__ import annotations

import json
import math
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from app.store_file import read_only_parts
from engine.errors import BeamwiseError

JOURNAL_FORMAT = "beamwise-journal"
JOURNAL_VERSION = 1
SUFFIX = ".journal.jsonl"


class JournalError(BeamwiseError):
    """A journal could not be written or read."""


@dataclass(frozen=True)
class JournalHeader:
    """The first line: which database the run belongs to and what was already written there."""

    db: str  # the database's resolved path
    created: str  # the session's creation time, kept on import
    session_id: int | None  # the session row written before the database became busy, if any
    pid: int
    host: str
    previous_id: int | None = None  # a follow-up: the session (turn) this run follows
    title: str | None = None  # the title the run was given (an eval's "eval beam line 3: ..."); None: its question


def folders_for(db_path: Path, data_folder: Path) -> tuple[Path, ...]:
    """Where journals of `db_path` may lie: beside it, then the user data folder's `journals/`."""
    return (db_path.parent, data_folder / "journals")


def journal_folders(db_path: Path, data_folder: Path) -> list[Path]:
    """Where a run's journal may go, best first: beside the database when its folder is writable, then the user
    data folder's `journals/` (the importer looks in both; a full disk beside the database may have room there)."""
    beside, fallback = folders_for(db_path, data_folder)
    return [beside, fallback] if os.access(beside, os.W_OK) and beside != fallback else [fallback]


class RunJournal:
    """Appends one run's events; `sync` (at each step's end) flushes them to the disk."""

    def __init__(self, folder: Path, header: JournalHeader) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{Path(header.db).name}.{header.created[:10]}-{uuid.uuid4().hex[:8]}{SUFFIX}"
        self.path = folder / name
        self._file: TextIO = self.path.open("x", encoding="utf-8", newline="\n")
        try:
            self._line({"format": JOURNAL_FORMAT, "version": JOURNAL_VERSION, **header.__dict__})
            self.sync()
        except OSError:  # no room even for the first line: leave no empty journal behind
            self.discard()
            raise

    def append(self, seconds: float, event: dict[str, Any]) -> None:
        self._line({"t": round(seconds, 6), "event": event})

    def sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def discard(self) -> None:
        """Close and delete the journal (one that could not take the run: another holds all of it)."""
        try:
            self._file.close()
        except OSError:
            pass  # its buffered tail could not be written: the file goes anyway
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._file.closed:
            return
        self._line({"closed": True})
        self.sync()
        self._file.close()

    def _line(self, data: dict[str, Any]) -> None:
        self._file.write(json.dumps(data, ensure_ascii=False) + "\n")


@dataclass(frozen=True)
class Journal:
    """A journal read back: its header, its timed events, and whether its writer closed it."""

    path: Path
    header: JournalHeader
    events: tuple[tuple[float, dict[str, Any]], ...]
    closed: bool


def read_journal(path: Path) -> Journal:
    """Parse a journal; a torn last line (the writer was killed mid-write) is ignored. A journal this Beamwise
    cannot read is a JournalError that names it and says what to do; the file is never changed here."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise JournalError(f"cannot read the run journal {path} ({error}).",
                           hint=f"Make it readable, or move it out of {path.parent}.") from error
    records = _records(path, lines)
    if not records or records[0].get("format") != JOURNAL_FORMAT:
        raise JournalError(f"{path} is not a Beamwise run journal (its first line does not say so).",
                           hint="A run killed while it started one leaves it empty: delete it.")
    head = records[0]
    version = head.get("version")
    if type(version) is not int or version != JOURNAL_VERSION:
        raise JournalError(f"the run journal {path} is of version {version!r}; this Beamwise reads version "
                           f"{JOURNAL_VERSION}.", hint=LEFT_IN_PLACE)
    problem = _header_problem(head)
    if problem is not None:
        raise JournalError(f"the run journal {path} has a damaged first line ({problem}).", hint=LEFT_IN_PLACE)
    header = JournalHeader(db=head["db"], created=head["created"], session_id=head.get("session_id"),
                           pid=head["pid"], host=head["host"], previous_id=head.get("previous_id"),
                           title=head.get("title"))
    events = []
    for number, record in enumerate(records[1:], 2):
        if "event" not in record:
            continue
        t = record.get("t")
        if type(t) not in (int, float) or not math.isfinite(t):
            raise JournalError(f"the run journal {path} has a damaged line {number}: its time 't' is {t!r}, not a "
                               "number of seconds.", hint=LEFT_IN_PLACE)
        events.append((float(t), record["event"]))
    return Journal(path, header, tuple(events), closed=any(r.get("closed") is True for r in records[1:]))


LEFT_IN_PLACE = "It was left in place: a newer Beamwise may import it; otherwise delete it, or keep it for a report."


def _header_problem(head: dict[str, Any]) -> str | None:
    """What in the first line is not as a writer writes it: texts, a process id, session ids."""
    for key in ("db", "created", "host"):
        if not isinstance(head.get(key), str):
            return f"{key} is {head.get(key)!r}, not text"
    if type(head.get("pid")) is not int or not 0 <= head["pid"] < 2**32:
        return f"pid is {head.get('pid')!r}, not a process id"
    if head.get("title") is not None and not isinstance(head["title"], str):
        return f"title is {head['title']!r}, not text"
    for key in ("session_id", "previous_id"):
        value = head.get(key)
        if value is not None and (type(value) is not int or not 0 < value < 2**63):
            return f"{key} is {value!r}, not a session id"
    return None


def _records(path: Path, lines: list[str]) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(lines, 1):
        try:
            data = json.loads(line)
        except (json.JSONDecodeError, RecursionError, ValueError) as error:
            if number == len(lines):
                break  # the last line was cut short by a kill: every line before it is whole
            raise JournalError(f"the run journal {path} has a damaged line {number} ({error}).",
                               hint=LEFT_IN_PLACE) from error
        if isinstance(data, dict):
            records.append(data)
    return records


def header_for(db_path: Path, created: str, session_id: int | None, previous_id: int | None = None,
               title: str | None = None) -> JournalHeader:
    return JournalHeader(db=str(db_path.resolve()), created=created, session_id=session_id, pid=os.getpid(),
                         host=socket.gethostname(), previous_id=previous_id, title=title)


def saved_when(db_path: Path, read_only: bool, many: bool = False) -> str:
    """When a run (`many` runs), kept in journals of the database at `db_path`, reaches it: a busy or full database's
    next opening imports it. A read-only one is opened to be read only and imports nothing, so it waits until the
    database is made writable: "the next time Beamwise opens it" was promised, and every later command read the
    database without the run, not a word said."""
    if not read_only:
        return "is saved into the database the next time Beamwise opens it (any command or the window)"
    it, run = ("them", "them") if many else ("it", "this run")
    return (f"{'are' if many else 'is'} saved into the database only once it can be written: make "
            f"{read_only_parts(db_path)} writable, and the next command or the window saves {it}; until then every "
            f"command reads the database without {run}")


def journal_db(path: Path) -> str | None:
    """The database (resolved path) a journal's first line names; None when that line is no journal's."""
    head = _first_line(path)
    return head.get("db") if isinstance(head, dict) and head.get("format") == JOURNAL_FORMAT else None


def _first_line(path: Path) -> Any:
    """The JSON of a journal's first line, its header, read alone; None when it cannot be read as JSON."""
    try:
        with path.open(encoding="utf-8") as file:
            return json.loads(file.readline())
    except (OSError, ValueError, RecursionError):
        return None


def journals_of(db_path: Path, data_folder: Path) -> list[Path]:
    """Journal files that may belong to `db_path` (headers decide), the run that started first first: they are
    imported in this order, so their sessions' ids follow their runs'. By name (a random part), an eval's line 2
    was imported before its line 1."""
    found = [p for folder in folders_for(db_path, data_folder) if folder.is_dir()
             for p in folder.glob(f"*{SUFFIX}") if p.is_file()]
    return sorted(found, key=_run_order)


def _run_order(path: Path) -> tuple[float, int, str]:
    """When the journal's run started (its header's `created`, to the second), then when the journal was last
    written (one process's runs, an eval's, end in the order they start, often within one second), then its
    name. A header that cannot be read sorts first: its import says what is wrong with it."""
    try:
        started = datetime.fromisoformat(_first_line(path)["created"]).timestamp()  # offsets differ across DST
        written = path.stat().st_mtime_ns
    except (OSError, ValueError, TypeError, KeyError):  # TypeError: no header (None), or no text in it
        return -math.inf, 0, path.name
    return started, written, path.name
