"""Checking a session file completely before import: every value's type, every id it refers to, every step.

Importing writes nothing until the whole file has passed, so a hand-edited or damaged file
never leaves a session that later views or exports cannot read. The `path` each check takes begins its refusals:
the file, or "FILE, turn N" for a turn of a conversation (app/export/dump.py).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from app.json_types import conforms, described, field_types, mistyped_field, out_of_kind
from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.errors import BeamwiseError

STATES = ("running", "kept", "pruned", "final")
REQUIRED = {"sessions": ("question", "created", "status"), "candidates": ("id", "step", "text", "state"),
            "steps": ("step",)}
ID_LISTS = ("beams", "kept", "pruned")
TIMES = ("created", "finished")  # ISO date-times: the list sorts by `created` (app/session_sql.py `instant`)


class SessionFileInvalid(BeamwiseError):
    """A file given to import is not a Beamwise session export this version can read."""

    hint = "Import a .json file written by `beamwise sessions export ID --format json`."


SECTIONS = {"sessions": "session", "candidates": "candidates", "steps": "timeline"}  # each table's key in a file
JSON_FIELDS = {"sessions": ("search", "cache", "path"), "steps": ID_LISTS}  # data, not column text
SETTINGS = {"search": SearchConfig, "cache": CacheConfig}  # a session's and its run_started's settings objects


def check_values(table: str, rows: list[dict], columns: dict[str, type], path: object) -> None:
    """Every value has its column's type (None only where a column may be empty); text is valid UTF-8."""
    plain = {k: v for k, v in columns.items() if k not in JSON_FIELDS.get(table, ())}
    for number, row in enumerate(rows):
        if table == "sessions" and any(not isinstance(row.get(k), dict | None) for k in SETTINGS):
            raise SessionFileInvalid(f"{path}: the session's search and cache settings should be objects.")
        if table == "sessions" and (problem := _settings_problem(row)) is not None:
            raise SessionFileInvalid(f"{path}: the session's {problem}.")
        for key, kind in plain.items():
            value = row.get(key)
            where = f"{path}: {_entry(table, number)}, field {key!r}"
            if value is None:
                if key in REQUIRED.get(table, ()):
                    raise SessionFileInvalid(f"{where} is missing.")
                continue
            if not _fits(value, kind):
                raise SessionFileInvalid(f"{where} {_why_not(value, kind)}.")
            if table == "sessions" and key in TIMES and not _iso_time(value):
                raise SessionFileInvalid(f"{where} should be a date and time such as 2026-12-07T07:22:15+00:00, "
                                         f"not {value!r:.40}.")


def _entry(table: str, number: int) -> str:
    """Which row of a turn, named by the file's section: "the session" (a turn has one), "timeline entry 2"."""
    return "the session" if table == "sessions" else f"{SECTIONS[table]} entry {number + 1}"


def _fits(value: Any, kind: type) -> bool:
    """A column's value: as an event field's (integers SQLite holds, bools among them for `finished` and
    `emulated`; UTF-8 text), and a float finite too; other column types take anything."""
    if kind not in (int, float, str):
        return True
    return conforms(value, kind) and (kind is not float or math.isfinite(value))


def _why_not(value: Any, hint: Any) -> str:
    """What is wrong with a value that does not fit its type `hint`, said."""
    return out_of_kind(value, hint) or f"should be {described(hint)}, not {type(value).__name__} ({value!r:.40})"


def _iso_time(text: str) -> bool:
    """Whether `text` is a date and time as Beamwise writes them (2026-12-07T07:22:15+00:00): any other text,
    "not a date" say, sorted as the newest session and was shown as its date."""
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return len(text) >= 19 and text[10] == "T"


def check_tree(session: dict, candidates: list[dict], timeline: list[dict], path: object) -> None:
    """Ids unique, parents and every listed id refer to candidates, states known, steps in order."""
    ids = [c["id"] for c in candidates]
    known = set(ids)
    if len(known) != len(ids):
        raise SessionFileInvalid(f"{path}: two candidates share an id.")
    for c in candidates:
        if c.get("parent") is not None and c["parent"] not in known:
            raise SessionFileInvalid(f"{path}: candidate {c['id']} has parent {c['parent']}, which is not a candidate.")
        if c["state"] not in STATES:
            raise SessionFileInvalid(f"{path}: candidate {c['id']} has the unknown state {c['state']!r}.")
        if c["step"] < 1:
            raise SessionFileInvalid(f"{path}: candidate {c['id']} is in step {c['step']}; steps start at 1.")
    steps = [t["step"] for t in timeline]
    if len(set(steps)) != len(steps) or any(s < 1 for s in steps):
        raise SessionFileInvalid(f"{path}: the timeline's steps repeat or do not start at 1.")
    for t in timeline:
        for key in ID_LISTS:
            _check_ids(t.get(key) or [], known, f"{path}: step {t['step']}'s {key!r}")
    _check_ids(session.get("path") or [], known, f"{path}: the session's chosen path")


def _check_ids(values: Any, known: set[int], where: str) -> None:
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise SessionFileInvalid(f"{where} should be a list of candidate ids.")
    missing = [v for v in values if v not in known]
    if missing:
        raise SessionFileInvalid(f"{where} names {missing[0]}, which is not a candidate.")


def check_events(events: list[dict], candidates: list[dict], path: object) -> None:
    """The events start the run; candidate events name candidates of the file; step and run events list only
    those ids."""
    known = {c["id"] for c in candidates}
    if (candidates or events) and not (events and events[0].get("type") == "run_started"):
        raise SessionFileInvalid(f"{path}: its events do not start with run_started; the window and the exports "
                                 "show a session from its events, so this one could not be shown.")
    for number, data in enumerate(events):
        where = f"{path}: event {number + 1} ({data.get('type')})"
        if str(data.get("type", "")).startswith("candidate_"):
            _check_ids([data.get("id")], known, f"{where}'s id")
            if data.get("parent") is not None:
                _check_ids([data["parent"]], known, f"{where}'s parent")
        for key in (*ID_LISTS, "path"):
            if key in data:
                _check_ids(data[key], known, f"{where}'s {key!r}")


def check_turn_order(turns: list[tuple[dict, list[dict]]], path: object) -> None:
    """Each turn's (session, events) follows the turns before it in the file: the earlier turns its run was sent
    (its run_started history) are theirs, question and answer, so no turn is missing, repeated or moved."""
    earlier: list[list[str]] = []
    for number, (session, events) in enumerate(turns, 1):
        sent = next((e.get("history") for e in events if e.get("type") == ev.RunStarted.type), None)
        if sent is not None and [list(turn) for turn in sent] != earlier:
            raise SessionFileInvalid(
                f"{path} has turns that do not follow each other (one missing, repeated or moved): turn {number} "
                f"({session['question'][:40]!r}) was asked after {len(sent)} earlier turns that are not the "
                f"{len(earlier)} before it in the file.")
        earlier.append([session["question"], session.get("answer") or ""])


def check_event_fields(events: list[dict], path: object) -> None:
    """Every field of every event (as `ev.to_dict` wrote it) has the type its class in engine/events.py declares
    (a JSON list for a tuple); the window and the exports read these, so a field of another type would break
    them later."""
    for number, data in enumerate(events):
        problem = _field_problem(data)
        if problem is not None:
            raise SessionFileInvalid(f"{path}: event {number + 1} ({data.get('type')}), {problem}.")


def restored_numbers(data: dict) -> dict:
    """The read event `data` with its numbers back: the JSON export writes a float that is not a number as null
    (app.export.dump.finite), and a field declared a plain float reads that null as NaN again."""
    hints = field_types(ev.EVENT_TYPES[data["type"]])
    return {name: math.nan if value is None and hints.get(name) is float else value for name, value in data.items()}


def event_problem(data: Any) -> str | None:
    """Why `data` is not an event this Beamwise can read and show, or None: an unknown type, a missing field, or
    a field of another type than engine/events.py declares (fields it does not know are dropped, as on load)."""
    try:
        data = ev.to_dict(ev.from_dict(data))
    except (AttributeError, KeyError, TypeError, ValueError) as error:  # not an object, or not this version's
        return f"it cannot be read ({error!r})"
    return _field_problem(data)


def _field_problem(data: dict) -> str | None:
    """The first field of the read event `data` (a dict `ev.to_dict` wrote) whose value is not of its declared
    type, said, or None."""
    hints = field_types(ev.EVENT_TYPES[data["type"]])
    for name, value in data.items():
        if name != "type" and not conforms(value, hints[name]):
            return f"field {name!r} {_why_not(value, hints[name])}"
    return _settings_problem(data)


def _settings_problem(data: dict) -> str | None:
    """The first settings field (a search or cache object: a session's or run_started's) of another type than
    its config declares, said; fields this version does not have pass (an export from another version)."""
    for name, kind in SETTINGS.items():
        settings = data.get(name)
        problem = mistyped_field(kind, settings, unknown=True) if isinstance(settings, dict) else None
        if problem is not None:
            return f"{name} settings: {problem}"
    return None
