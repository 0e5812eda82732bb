"""Run journals damaged on the disk, line by line: each is named, left in place and stops nothing; the journals
after it are still imported, and a conversation loop a header would make never reaches the database."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from app.cli import main
from app.conversations import history, line_of
from app.journal import RunJournal, header_for
from app.store import SessionStore
from engine import events as ev
from tests.test_faults import db, fake  # noqa: F401 (a fixture)


def journal(db: Path, name: str, edit=lambda number, line: line, previous: int | None = None,  # noqa: F811
            session_id: int | None = None) -> Path:
    """A closed journal of a two-step run for `db` named `name`, each line (its number from 1, the header's
    included) passed through `edit` as a dict; a str replaces it, a list repeats it."""
    written = RunJournal(db.parent, header_for(db, "2026-11-24T10:00:00", session_id, previous))
    for number, event in enumerate(fake(2)):
        written.append(0.1 * number, ev.to_dict(event))
    written.close()
    lines = written.path.read_text(encoding="utf-8").splitlines()
    edited = [edit(number, json.loads(line)) for number, line in enumerate(lines, 1)]
    path = written.path.with_name(f"{db.name}.{name}.journal.jsonl")
    path.write_text("".join(f"{line if isinstance(line, str) else json.dumps(line)}\n"
                            for got in edited for line in (got if isinstance(got, list) else [got])), encoding="utf-8")
    written.path.unlink()
    return path


def set_t(value):
    return lambda number, line: {**line, "t": value} if number == 3 else line


def header(**fields):
    return lambda number, line: {**line, **fields} if number == 1 else line


def without_t(number, line):
    return {k: v for k, v in line.items() if k != "t"} if number == 3 else line


@pytest.mark.parametrize(("edit", "said"), [
    (set_t(None), "has a damaged line 3: its time 't' is None"),
    (without_t, "has a damaged line 3: its time 't' is None"),
    (set_t([1]), "has a damaged line 3: its time 't' is [1]"),
    (set_t("0.2"), "has a damaged line 3: its time 't' is '0.2'"),
    (set_t(float("inf")), "has a damaged line 3: its time 't' is inf"),
    (lambda number, line: '{"t": 0.3, "event": {"ty' if number == 4 else line, "has a damaged line 4 ("),
    (header(pid=10**30, closed=False), "has a damaged first line (pid is 1000000000000000000000000000000"),
    (header(session_id="7"), "has a damaged first line (session_id is '7', not a session id)"),
    (header(host=None), "has a damaged first line (host is None, not text)"),
    (header(version=2), "is of version 2; this Beamwise reads version 1"),
    (header(version=True), "is of version True"),
])  # fmt: skip
def test_a_damaged_line_is_named_and_the_journals_after_it_are_still_imported(db, capsys, edit, said):  # noqa: F811
    """A bad 't' or a huge pid raised out of every command (the window's start too); a version was never read."""
    bad = journal(db, "2026-01-01-aaaaaaaa", edit)
    good = journal(db, "2026-01-02-bbbbbbbb")
    assert main(["sessions", "list", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert f"the run journal {bad} {said}" in err and "Traceback" not in err
    assert bad.exists() and not good.exists(), "the damaged one kept, the one after it imported"
    with SessionStore(db) as store:
        assert [s["status"] for s in store.list_sessions()] == ["finished"]


def test_a_journal_whose_rows_break_a_constraint_is_not_called_a_damaged_database(db, capsys):  # noqa: F811
    """A repeated step_selected line broke a UNIQUE constraint: that read as "the session database is damaged",
    with advice to move a healthy database aside, and it stopped every journal after it."""
    bad = journal(db, "2026-01-01-aaaaaaaa",
                  lambda number, line: [line, line] if line.get("event", {}).get("type") == "step_selected" else line)
    good = journal(db, "2026-01-02-bbbbbbbb")
    assert main(["sessions", "list", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert f"the run journal {bad} was not imported" in err and "UNIQUE constraint failed" in err
    assert "damaged" not in err and "move-aside" not in err
    assert bad.exists() and not good.exists()


def test_a_header_that_would_loop_a_conversation_is_refused(db, capsys):  # noqa: F811
    """A header whose session follows a later turn of its own conversation (2 after 3, 3 after 2): imported,
    it made `sessions show` loop until memory ran out."""
    from tests.test_conversations import record

    with SessionStore(db) as store:
        first = record(store, "What is 2+3?")
        second = record(store, "And times 4?", previous=first)
        third = record(store, "And minus 1?", previous=second)
        created = store.get_session(second)["created"]
    path = journal(db, "2026-01-01-aaaaaaaa", header(created=created), previous=third, session_id=second)
    assert main(["sessions", "show", str(second), "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert f"the run journal {path} was not imported" in err and "a later turn of its own conversation" in err
    with SessionStore(db) as store:
        assert [s["id"] for s in line_of(store, third)] == [first, second, third], "the database as it was"


def test_a_conversation_loop_already_in_a_database_ends_where_it_closes(db):  # noqa: F811
    from tests.test_conversations import record

    with SessionStore(db) as store:
        first = record(store, "What is 2+3?")
        second = record(store, "And times 4?", previous=first)
    with sqlite3.connect(db) as conn:  # damage made outside Beamwise
        conn.execute("UPDATE sessions SET previous_id = ? WHERE id = ?", (second, first))
    with SessionStore(db) as store:
        assert [s["id"] for s in line_of(store, second)] == [first, second]
        assert history(store, second) == [("What is 2+3?", store.get_session(first)["answer"])]
    assert main(["sessions", "show", str(second), "--db", str(db)]) == 0


def test_a_database_that_cannot_take_the_rows_keeps_the_journal_for_later(db, capsys, monkeypatch):  # noqa: F811
    """A full disk is the database's fault, not the journal's: never "delete it"."""
    import app.journal_import
    from app.store_errors import StoreError

    def full(store, journal):
        raise StoreError(f"cannot use the session database {db}: database or disk is full.")

    path = journal(db, "2026-01-01-aaaaaaaa")
    monkeypatch.setattr(app.journal_import, "replay", full)
    assert main(["sessions", "list", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert f"the run journal {path} was not imported yet" in err and "stays until the database can be written" in err
    assert "delete it" not in err and path.exists()


def test_events_that_make_no_run_are_named_and_the_journals_after_them_still_imported(db, capsys):  # noqa: F811
    """Each line reads as an event, but without run_started first they make no session: the recorder refuses them,
    and that is the journal's problem, said as one."""
    bad = journal(db, "2026-01-01-aaaaaaaa",
                  lambda number, line: [] if line.get("event", {}).get("type") == "run_started" else line)
    good = journal(db, "2026-01-02-bbbbbbbb")
    assert main(["sessions", "list", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert f"the run journal {bad} was not imported: its events do not make a session this Beamwise can show " \
           "(ValueError: the recorder got prefill_done before run_started" in err
    assert bad.exists() and not good.exists()


def test_a_fault_in_the_import_is_not_called_a_damaged_journal(db, capsys, monkeypatch):  # noqa: F811
    """A fault in Beamwise's replay read "its events do not make a session", the words for a damaged journal, and
    told the user to delete a healthy one; it is said as a fault, the journal kept and the database still opened."""
    import app.journal_import

    def faulty(store, conn, journal):
        raise AttributeError("'NoneType' object has no attribute 'step'")

    bad = journal(db, "2026-01-01-aaaaaaaa")
    monkeypatch.setattr(app.journal_import, "_replay_rows", faulty)
    assert main(["sessions", "list", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert f"the run journal {bad} was not imported: a fault in Beamwise stopped its import (AttributeError: " in err
    assert "do not make a session" not in err and "delete it" not in err and "keep it for a report" in err
    assert bad.exists()
