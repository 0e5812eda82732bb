"""How engine events sit in the `events` table: JSON dicts, a scored candidate without what its text event holds.

`CandidateScored` repeats every field of `CandidateText` (step, parent, text, tokens, finished,
group). Stored, a scored event keeps only its id, its scores and any field that differs from
the text event of the same candidate earlier in the run; `expand` puts the rest back, so
reading returns exactly the events the engine yielded.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

from engine import events as ev

TEXT, SCORED = ev.CandidateText.type, ev.CandidateScored.type
SHARED_FIELDS = ("step", "parent", "text", "tokens", "finished", "group")
SCORED_FIELDS = tuple(f.name for f in dataclasses.fields(ev.CandidateScored))  # the engine's order


def compact(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The dicts to store, in order; a scored event whose text event is not among `events` is stored whole."""
    texts: dict[int, dict[str, Any]] = {}
    out = []
    for data in events:
        kind = data["type"]
        if kind == TEXT:
            texts[data["id"]] = data
        elif kind == SCORED and data["id"] in texts:
            seen = texts[data["id"]]
            data = {k: v for k, v in data.items() if k not in SHARED_FIELDS or seen.get(k) != v}
        out.append(data)
    return out


def expand(stored: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Inverse of `compact`: every scored event whole again, fields in the engine's order."""
    texts: dict[int, dict[str, Any]] = {}
    out = []
    for data in stored:
        kind = data["type"]
        if kind == TEXT:
            texts[data["id"]] = data
        elif kind == SCORED and not all(k in data for k in SHARED_FIELDS):
            seen = texts[data["id"]]
            data = {"type": kind, **{k: data[k] if k in data else seen[k] for k in SCORED_FIELDS}}
        out.append(data)
    return out


def rows(session_id: int, items: Iterable[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """`events` table rows for (seq, event dict) pairs, compacted."""
    items = list(items)
    stored = compact(data for _, data in items)
    return [{"session_id": session_id, "seq": seq, "type": data["type"], "data": json.dumps(data)}
            for (seq, _), data in zip(items, stored, strict=True)]
