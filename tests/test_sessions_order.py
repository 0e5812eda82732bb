"""Sessions are listed newest first by the moment they were created, whatever UTC offset each was stored with: the
ISO text sorted a run made at 14:47-05:00 (19:47 UTC, the newest) below 19:37+00:00, and `--limit` left it out, in
`beamwise sessions list` and in the window's Sessions tab alike."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.cli import main
from app.conversations import list_conversations
from app.gui.sessions_panel import SessionsPanel
from app.session_sql import instant
from app.store import SessionStore

IN_UTC = ("2026-12-07T19:30:00+00:00", "2026-12-07T19:37:00+00:00")
IN_NEW_YORK = "2026-12-07T14:47:23-05:00"  # 19:47:23 UTC: the newest, though its text sorts first


def stored(store: SessionStore, *created: str) -> list[int]:
    """One finished session per creation time, in this order; their ids."""
    return [store.create_session({"question": f"Question made at {when}", "status": "finished", "created": when})
            for when in created]


@pytest.fixture
def store() -> SessionStore:
    return SessionStore(memory=True)


def test_a_session_from_another_offset_is_listed_at_its_moment(store) -> None:
    early, late, new_york = stored(store, *IN_UTC, IN_NEW_YORK)
    assert [s["id"] for s in store.list_sessions()] == [new_york, late, early]  # text order put new_york last
    assert [s["id"] for s in store.list_sessions(limit=1)] == [new_york]


def test_the_repeated_hour_after_the_clocks_go_back_is_in_order(store) -> None:
    """New York, 1 November 2026: 01:50 EDT (05:50 UTC), then the clock goes back and 01:10 EST is 06:10 UTC."""
    before, after = stored(store, "2026-11-01T01:50:00-04:00", "2026-11-01T01:10:00-05:00")
    assert [s["id"] for s in store.list_sessions()] == [after, before]


def test_imports_keep_their_offset_and_any_iso_form_sorts_by_its_moment(store) -> None:
    """Forms an import's check accepts (`datetime.fromisoformat`) that SQLite's julianday() cannot read: +0530, a
    comma before the fraction; and Z."""
    kolkata, paris, utc = stored(store, "2026-12-08T00:50:00+0530",  # 19:20 UTC
                                 "2026-12-07T20:40:00,5+01:00",  # 19:40:00.5 UTC
                                 "2026-12-07T19:35:00Z")
    ids = [s["id"] for s in store.list_sessions()]
    assert ids == [paris, utc, kolkata]


def test_the_same_moment_keeps_a_stable_order_by_id_and_no_time_comes_last(store) -> None:
    first, same, nonsense = stored(store, "2026-12-07T19:00:00+00:00", "2026-12-07T14:00:00-05:00", "not a time")
    assert [s["id"] for s in store.list_sessions()] == [same, first, nonsense]
    assert instant("not a time") is None and instant(None) is None
    assert instant("2026-12-07T19:00:00") == instant("2026-12-07T19:00:00+00:00")  # no offset: UTC, as SQLite


def test_conversations_are_listed_by_the_moment_of_their_newest_turn(store) -> None:
    early, late, new_york = stored(store, *IN_UTC, IN_NEW_YORK)
    follow = store.create_session({"question": "And then?", "status": "finished",
                                   "created": "2026-12-07T14:50:00-05:00"})  # a conversation of its own
    rows = list_conversations(store)
    assert [r["id"] for r in rows] == [follow, new_york, late, early]
    assert [r["id"] for r in list_conversations(store, limit=2)] == [follow, new_york]


def test_the_window_lists_the_newest_session_first(qtbot, store) -> None:
    early, late, new_york = stored(store, *IN_UTC, IN_NEW_YORK)
    panel = SessionsPanel(store)
    qtbot.addWidget(panel)
    assert [row["id"] for row in panel.model.rows] == [new_york, late, early]


def test_sessions_list_limit_keeps_the_newest(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    with SessionStore(tmp_path / "s.db") as store:
        _, late, new_york = stored(store, *IN_UTC, IN_NEW_YORK)
    assert main(["sessions", "list", "--limit", "1", "--db", str(tmp_path / "s.db")]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[0] for row in rows] == [str(new_york)]
    assert main(["sessions", "list", "--db", str(tmp_path / "s.db")]) == 0
    assert [row.split()[0] for row in capsys.readouterr().out.splitlines()[1:3]] == [str(new_york), str(late)]
