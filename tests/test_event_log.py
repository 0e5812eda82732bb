"""Each step's text is stored once: the events table, the m002 migration on a database of the last release."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

from app import event_log
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import SearchConfig

DATA = Path(__file__).parent / "data"
OLD_DB = DATA / "sessions_m001.db"  # written by the store before m002 (commit 85951bf), see its commit


def engine_like(question: str, search: SearchConfig) -> list:
    """The fake stream with each scored text equal to its generated text, as the real engine yields it."""
    texts: dict[int, str] = {}
    out = []
    for event in fake_run(question, search):
        if isinstance(event, ev.CandidateText):
            texts[event.id] = event.text
        elif isinstance(event, ev.CandidateScored):
            event = dataclasses.replace(event, text=texts[event.id])
        out.append(event)
    return out


def stored_scored(store: SessionStore, session_id: int) -> list[dict]:
    rows = store.db.execute("SELECT data FROM events WHERE session_id = ? AND type = 'candidate_scored'",
                            [session_id]).fetchall()
    return [json.loads(data) for (data,) in rows]


def test_compact_then_expand_gives_back_the_same_events():
    dicts = [ev.to_dict(e) for e in engine_like("q", SearchConfig(beams=2, width=2, max_steps=3))]
    stored = event_log.compact(dicts)
    scored = [d for d in stored if d["type"] == "candidate_scored"]
    assert scored and all(set(d) == {"type", "id", "score", "aggregate"} for d in scored)
    assert event_log.expand(stored) == dicts
    assert [list(d) for d in event_log.expand(stored)] == [list(d) for d in dicts]  # field order too


def test_a_scored_field_that_differs_from_the_text_event_is_kept():
    dicts = [ev.to_dict(e) for e in fake_run("q", SearchConfig(beams=1, width=2, max_steps=1))]
    stored = event_log.compact(dicts)
    scored = [d for d in stored if d["type"] == "candidate_scored"]
    assert all(d["text"].startswith("Step 1 of candidate") and "parent" not in d for d in scored)
    assert event_log.expand(stored) == dicts


def test_the_recorder_stores_each_text_once_and_reads_every_event_back():
    events = engine_like("How many?", SearchConfig(beams=2, width=3, max_steps=3))
    with SessionStore(memory=True) as store:
        recorder = SessionRecorder(store)
        for event in events:
            recorder.write(event)
        assert all("text" not in d for d in stored_scored(store, recorder.session_id))
        text = store.db.execute("SELECT group_concat(data) FROM events").fetchone()[0]
        assert text.count("Step 2 of candidate 9.") == 1
        assert store.events(recorder.session_id) == events


def test_m002_migrates_a_database_of_the_last_release(tmp_path):
    db, before_db = tmp_path / "old.db", tmp_path / "before.db"
    shutil.copy(OLD_DB, db)
    shutil.copy(OLD_DB, before_db)  # read for comparison (a WAL file grows side files even when only read)
    expected = json.loads((DATA / "sessions_m001_events.json").read_text(encoding="utf-8"))
    with SessionStore(db) as store:
        assert [r["name"] for r in store.db["migrations"].rows][:2] == ["m001_initial", "m002_scored_text_once"]
        assert store.schema_version == 4  # m003 (conversations) and m004 too: tests/test_conversation*.py
        for session_id, events in expected.items():
            assert store.event_dicts(int(session_id)) == events
        assert all("text" not in d for d in stored_scored(store, 2))  # the engine-like session: texts once
        assert all("text" in d and "parent" not in d for d in stored_scored(store, 1))  # the fake's other texts
    with closing(sqlite3.connect(before_db)) as old, closing(sqlite3.connect(db)) as new:
        before = old.execute("SELECT sum(length(data)) FROM events WHERE session_id = 2").fetchone()[0]
        after = new.execute("SELECT sum(length(data)) FROM events WHERE session_id = 2").fetchone()[0]
    assert after < before
