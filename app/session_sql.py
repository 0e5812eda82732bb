"""How session rows are read back: the search's match, the newest-first order, and a row's JSON columns decoded."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from app.text_search import NOT_ASCII, needle

JSON_COLUMNS = ("search", "cache")


def instant(created: str | None) -> float | None:
    """The moment an ISO time names (`created`, as stored: '2026-12-07T14:47:23-05:00'), in seconds since 1970
    UTC; a time without an offset is read as UTC (as SQLite reads one); None for text that is no time.

    Each session keeps the offset of the machine that recorded it (an import keeps its file's), so their text does
    not sort as their moments do: 14:47-05:00 (19:47 UTC) sorted below 19:37+00:00, as did the second 01:10 of a
    night that put the clock back. SQLite's julianday() reads only some of the forms an import may hold
    (+0530, a comma before the fraction): this reads every form the import's check accepts (`fromisoformat`)."""
    try:
        when = datetime.fromisoformat(created or "")
        return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()
    except (TypeError, ValueError, OverflowError):  # no time, or one whose offset leaves the years 1 to 9999
        return None


def newest_first(alias: str = "") -> str:
    """The ORDER BY terms that list sessions (`alias` their table's, with its dot) newest first: by the moment they
    were created (`instant`, a function every `SessionStore` connection has), then by id, so that sessions of the
    same second, and rows whose `created` is no time (listed last), keep one order."""
    return f"instant({alias}created) DESC, {alias}id DESC"


def text_match(alias: str) -> str:
    """SQL true when the session's title, question or answer holds the search (`search_params`, the next nine
    parameters), whatever its case or form: a text that is not all ASCII through `holds` (app/text_search.py),
    the others through LIKE, which folds their letters as `holds` would and reads no text into Python."""
    return " OR ".join(f"CASE WHEN {alias}{c} GLOB ? THEN holds(CAST({alias}{c} AS BLOB), ?) "
                       f"ELSE {alias}{c} LIKE ? ESCAPE '\\' END" for c in ("title", "question", "answer"))


def search_params(search: str) -> list[Any]:
    """The parameters of `text_match` for the search box's text."""
    folded = needle(search)
    like = "%" + folded.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    return [NOT_ASCII, folded.encode("utf-8"), like] * 3


def decode_session(row: dict) -> dict:
    """A sessions row as read: its JSON columns decoded."""
    for key in JSON_COLUMNS:
        row[key] = json.loads(row[key]) if row[key] else {}
    row["path"] = json.loads(row["path"]) if row["path"] else []
    row["emulated"] = None if row["emulated"] is None else bool(row["emulated"])
    return row
