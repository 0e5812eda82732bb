"""Run journals: one JSON Lines file per run that could not reach its session database, flushed per step.

A journal is written when the database is busy (another program holds its write lock) or
cannot be written. Its first line names the database and the run; every later line is one
engine event with its time since the run started; a last `{"closed": true}` line says the
writer let go of it. `app.journal_import` replays journals into the database the next time
the database is opened, and deletes each one only after its session committed.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

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


def folders_for(db_path: Path, data_folder: Path) -> tuple[Path, ...]:
    """Where journals of `db_path` may lie: beside it, then the user data folder's `journals/`."""
    return (db_path.parent, data_folder / "journals")


def journal_folder(db_path: Path, data_folder: Path) -> Path:
    """Beside the database when its folder is writable, else the user data folder's `journals/`."""
    beside = db_path.parent
    if os.access(beside, os.W_OK):
        return beside
    return data_folder / "journals"


class RunJournal:
    """Appends one run's events; `sync` (at each step's end) flushes them to the disk."""

    def __init__(self, folder: Path, header: JournalHeader) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{Path(header.db).name}.{header.created[:10]}-{uuid.uuid4().hex[:8]}{SUFFIX}"
        self.path = folder / name
        self._file: TextIO = self.path.open("x", encoding="utf-8", newline="\n")
        self._line({"format": JOURNAL_FORMAT, "version": JOURNAL_VERSION, **header.__dict__})
        self.sync()

    def append(self, seconds: float, event: dict[str, Any]) -> None:
        self._line({"t": round(seconds, 6), "event": event})

    def sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

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
    """Parse a journal; a torn last line (the writer was killed mid-write) is ignored."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise JournalError(f"cannot read the run journal {path} ({error}).") from error
    try:
        records = list(_records(lines))
    except json.JSONDecodeError as error:
        raise JournalError(f"the run journal {path} is damaged ({error}); it was left in place.") from error
    if not records or records[0].get("format") != JOURNAL_FORMAT:
        raise JournalError(f"{path} is not a Beamwise run journal.")
    head = records[0]
    try:
        header = JournalHeader(db=str(head["db"]), created=str(head["created"]), session_id=head.get("session_id"),
                               pid=int(head["pid"]), host=str(head["host"]), previous_id=head.get("previous_id"))
    except (KeyError, TypeError, ValueError) as error:
        raise JournalError(f"the run journal {path} has a damaged first line ({error!r}).") from error
    events = tuple((float(r["t"]), r["event"]) for r in records[1:] if "event" in r)
    return Journal(path, header, events, closed=any(r.get("closed") for r in records[1:]))


def _records(lines: list[str]) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(lines):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines) - 1:
                return  # the last line was cut short by a kill: every line before it is whole
            raise
        if isinstance(data, dict):
            yield data


def header_for(db_path: Path, created: str, session_id: int | None, previous_id: int | None = None) -> JournalHeader:
    return JournalHeader(db=str(db_path.resolve()), created=created, session_id=session_id, pid=os.getpid(),
                         host=socket.gethostname(), previous_id=previous_id)


def journals_of(db_path: Path, data_folder: Path) -> list[Path]:
    """Journal files that may belong to `db_path`, oldest name first (headers decide)."""
    found: list[Path] = []
    for folder in folders_for(db_path, data_folder):
        if folder.is_dir():
            found += sorted(p for p in folder.glob(f"*{SUFFIX}") if p.is_file())
    return found
