"""The lossless session dump (plain JSON data; a conversation: each of its turns) and importing one back."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from app import event_log
from app.conversations import line_of
from app.export.checks import (
    SECTIONS,
    SessionFileInvalid,
    check_event_fields,
    check_events,
    check_tree,
    check_turn_order,
    check_values,
    restored_numbers,
)
from app.session.steps import STATUS_OF_END
from app.store import SCHEMA_VERSION, SessionStore
from app.text_files import not_utf8, read_text
from engine import events as ev

FILE_FORMAT = "beamwise-session"
FILE_VERSION = 2  # 2: a conversation's turns; a one-turn session is still written as version 1
STATUSES = {*STATUS_OF_END.values(), "interrupted"}  # "running" is imported as interrupted
PRIVATE_SESSION_KEYS = ("id", "pid", "host", "conversation_id", "previous_id")  # meaningless in another db


def session_dump(store: SessionStore, session_id: int) -> dict[str, Any]:
    """Everything recorded for one session as plain JSON data (ids local to the db left out); a session that is
    a turn of a longer conversation gives the whole conversation (version 2: its turns, first turn first)."""
    line = line_of(store, session_id)
    if len(line) == 1:
        return {"format": FILE_FORMAT, "version": 1, "schema_version": SCHEMA_VERSION, **_turn_dump(store, session_id)}
    return {"format": FILE_FORMAT, "version": FILE_VERSION, "schema_version": SCHEMA_VERSION,
            "turns": [_turn_dump(store, row["id"]) for row in line]}


def turns_of(dump: dict[str, Any]) -> list[dict[str, Any]]:
    """The turns of a dump: one for a version 1 file, the listed ones for version 2."""
    return dump["turns"] if "turns" in dump else [dump]


def _turn_dump(store: SessionStore, session_id: int) -> dict[str, Any]:
    session = {k: v for k, v in store.get_session(session_id).items() if k not in PRIVATE_SESSION_KEYS}
    strip = ("session_id",)
    return {
        "session": session,
        "candidates": [{k: v for k, v in row.items() if k not in strip} for row in store.candidates(session_id)],
        "timeline": [{k: v for k, v in row.items() if k not in strip} for row in store.timeline(session_id)],
        "events": store.event_dicts(session_id),
    }


def import_session(store: SessionStore, path: Path | str) -> int:
    """Add the session (or conversation) in a JSON export to the store, in one transaction; returns the new id
    of its last turn. Every turn is checked before anything is written."""
    turns = [_checked_turn(store, turn, where) for where, turn in _read_dump(Path(path))]
    check_turn_order([(session, events) for session, _, _, events in turns], path)
    previous = None
    with store.transaction() as conn:
        for session, candidates, timeline, events in turns:
            sid = store.insert_session(conn, session, previous=previous)
            store.insert_rows(conn, "candidates", [{**c, "session_id": sid} for c in candidates])
            store.insert_rows(conn, "steps", [{**t, "session_id": sid, **{k: json.dumps(t.get(k) or [])
                                              for k in ("beams", "kept", "pruned")}} for t in timeline])
            store.insert_rows(conn, "events", event_log.rows(sid, enumerate(events)))
            previous = sid
    assert previous is not None
    return previous


def _checked_turn(store: SessionStore, dump: dict[str, Any], where: str) -> tuple[dict, list, list, list]:
    """One turn's rows and events, each checked; `where` begins every refusal: the file, and in a conversation
    its turn ("t.json, turn 2"), so a damaged turn is found without reading them all."""
    # an export never writes the source database's own ids and links (older hand-made files may): never taken
    session = {k: v for k, v in dump["session"].items() if k not in PRIVATE_SESSION_KEYS}
    if session.get("status") == "running":
        session["status"] = "interrupted"  # nothing is recording it any more
    if not isinstance(session.get("status"), str) or session["status"] not in STATUSES:  # a list: unhashable
        raise SessionFileInvalid(f"{where} has a session of status {session.get('status')!r}; a session is "
                                 f"{', '.join(sorted(STATUSES))}.")
    if isinstance(session.get("emulated"), bool):  # its column holds 0/1; another type is refused below
        session["emulated"] = int(session["emulated"])
    (session,) = _checked_rows(store, "sessions", [session], where)
    candidates = _checked_rows(store, "candidates", dump["candidates"], where)
    timeline = _checked_rows(store, "steps", dump["timeline"], where)
    for table, rows in (("sessions", [session]), ("candidates", candidates), ("steps", timeline)):
        check_values(table, rows, store.db[table].columns_dict, where)
    check_tree(session, candidates, timeline, where)
    try:
        events = [restored_numbers(ev.to_dict(ev.from_dict(data))) for data in dump["events"]]
    except (AttributeError, KeyError, TypeError, ValueError) as error:  # not an event, or a list of other things
        raise SessionFileInvalid(f"{where} has an event this Beamwise cannot read ({error!r}).") from error
    check_events(events, candidates, where)
    check_event_fields(events, where)
    return session, candidates, timeline, events


def _read_dump(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """The turns of the export at `path` (one for a version 1 file), each with its sections checked and with where
    its refusals say it is: the file, or "FILE, turn N" for each turn of a version 2 file."""
    try:
        dump = json.loads(read_text(path))
    except OSError as error:
        raise SessionFileInvalid(f"cannot read {path} ({error.strerror or error}).") from error
    except UnicodeDecodeError as error:  # as a question file and a problem set say it (app/text_files.py)
        raise SessionFileInvalid(f"{path} is {not_utf8(error)}.") from error
    except json.JSONDecodeError as error:
        raise SessionFileInvalid(f"{path} is not a Beamwise session export (not valid JSON: {error}).") from error
    except (ValueError, RecursionError) as error:  # a number of over 4,300 digits; arrays nested thousands deep
        what = "nested too deeply" if isinstance(error, RecursionError) else "a number with too many digits"
        raise SessionFileInvalid(f"{path} is not a Beamwise session export ({what} to read).") from error
    if not isinstance(dump, dict) or dump.get("format") != FILE_FORMAT:
        raise SessionFileInvalid(f"{path} is not a Beamwise session export (no \"format\": \"{FILE_FORMAT}\").")
    version = dump.get("version")
    if type(version) is not int or version < 1:
        raise SessionFileInvalid(f"{path} has an export version this Beamwise does not know ({version!r}); exports "
                                 f"say 1 to {FILE_VERSION}.")
    if version > FILE_VERSION:
        raise SessionFileInvalid(f"{path} was written by a newer Beamwise (export version {version}).",
                                 hint="Update Beamwise to import it.")
    if dump["version"] >= 2 and (not isinstance(dump.get("turns"), list) or not dump["turns"]):
        raise SessionFileInvalid(f"{path} is missing its 'turns' section.")
    if dump["version"] < 2:
        return [(str(path), _checked_sections(dump, str(path)))]
    return [(f"{path}, turn {number}", _checked_sections(turn, f"{path}, turn {number}"))
            for number, turn in enumerate(dump["turns"], 1)]


def _checked_sections(turn: Any, where: str) -> dict[str, Any]:
    """`turn` once it is an object with each section of its kind, and a session with a question and a time."""
    if not isinstance(turn, dict):
        raise SessionFileInvalid(f"{where} is not an object.")
    for key, kind in (("session", dict), ("candidates", list), ("timeline", list), ("events", list)):
        if not isinstance(turn.get(key), kind):
            raise SessionFileInvalid(f"{where} is missing its {key!r} section.")
    if not turn["session"].get("question") or not turn["session"].get("created"):
        raise SessionFileInvalid(f"{where} has a session without a question or creation time.")
    return turn


def _checked_rows(store: SessionStore, table: str, rows: list[Any], where: str) -> list[dict]:
    """Rows with one shared set of known columns (keys become SQL column names); unknown fields are refused, named
    by the file's section (a timeline entry, not a steps one: the file has no "steps")."""
    known = set(store.db[table].columns_dict)
    keys: set[str] = set()
    for row in rows:
        if not isinstance(row, dict):
            raise SessionFileInvalid(f"{where} has a {SECTIONS[table]} entry that is not an object.")
        keys |= set(row)
    unknown = keys - known
    if unknown:
        raise SessionFileInvalid(f"{where} has unknown {SECTIONS[table]} fields: "
                                 f"{', '.join(sorted(map(str, unknown)))}.")
    return [{k: row.get(k) for k in sorted(keys)} for row in rows]


def finite(value: Any) -> Any:
    """`value` with NaN and the infinities as null, so an export is JSON that jq and JavaScript read (Python writes
    NaN, which they refuse); a score that was NaN imports as none."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value
