"""Session ids are never given again (m004, `id_high_water`): `sessions delete 3 --yes` made the next run
"recorded as session 3", so a saved follow-up hint, an export's name or an earlier stderr line named an unrelated
run. Old databases migrate, keeping their rows, indexes and foreign keys; a Beamwise that does not know m004
refuses the file rather than give a deleted id again."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

import app.migrations as migrations
from app.cli import main
from app.export import export_session
from app.migrations import MIGRATIONS, SCHEMA_VERSION, table_names, unusable_schema
from app.recorder import SessionRecorder
from app.store import SessionStore
from app.store_errors import StoreTooNew
from benchmarks.fake_search import fake_run

OLD_DB = Path(__file__).parent / "data" / "sessions_m001.db"  # sessions 1, 2 and 3, written before m002
TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "2"]


def record(store: SessionStore, question: str = "What is 2+3?", previous: int | None = None) -> int:
    recorder = SessionRecorder(store, previous=previous)
    for event in fake_run(question):
        recorder.write(event)
    assert recorder.session_id is not None
    return recorder.session_id


def test_the_newest_sessions_id_is_not_given_again_after_its_delete() -> None:
    with SessionStore(memory=True) as store:
        ids = [record(store) for _ in range(3)]
        assert ids == [1, 2, 3]
        store.delete(3)
        assert record(store) == 4
        store.delete(4)
        store.delete(2)
        follow = record(store, "And times 4?", previous=1)
        assert follow == 5 and store.get_session(follow)["conversation_id"] == 1


def test_the_next_run_is_recorded_under_a_new_id(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    db = str(tmp_path / "s.db")
    for question in ("What is 2+3?", "What is 3+4?", "What is 4+5?"):
        assert main(["run", question, *TINY, "--db", db]) == 0
    assert main(["sessions", "delete", "3", "--yes", "--db", db]) == 0
    capsys.readouterr()
    assert main(["run", "What is 5+6?", *TINY, "--db", db]) == 0
    assert "recorded as session 4;" in capsys.readouterr().err


def test_two_connections_never_take_one_id(tmp_path: Path) -> None:
    """Two processes: each picks the next id inside its own write transaction, so a delete in one is honoured by
    the other's next insert."""
    path = tmp_path / "s.db"
    with SessionStore(path) as one, SessionStore(path) as two:
        assert [record(one), record(two)] == [1, 2]
        one.delete(2)
        assert record(two) == 3
        two.delete(3)
        assert record(one) == 4 and [s["id"] for s in two.list_sessions()] == [4, 1]


def test_an_import_after_a_delete_gets_a_new_id(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        first, second = record(store), record(store)
        export = export_session(store, second, "json", tmp_path / "two.json")
        store.delete(second)
        assert main(["sessions", "import", str(export), "--db", str(tmp_path / "s.db")]) == 0
        assert [s["id"] for s in store.list_sessions()] == [second + 1, first]


def test_a_database_of_the_old_schema_migrates_and_never_gives_its_largest_id_again(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    shutil.copy(OLD_DB, path)
    with SessionStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 4
        assert [r["name"] for r in store.db["migrations"].rows][-1] == "m004_session_ids_never_reused"
        assert [s["id"] for s in store.list_sessions()] == [3, 2, 1]  # the rows are kept
        assert list(store.db["id_high_water"].rows) == [{"name": "sessions", "largest_id": 3}]
        for table in ("candidates", "steps", "events"):  # their foreign keys still name the sessions table
            assert [fk.other_table for fk in store.db[table].foreign_keys] == ["sessions"]
        assert {tuple(i.columns) for i in store.db["sessions"].indexes} >= {("created",), ("conversation_id", "turn")}
        store.delete(3)
        assert record(store) == 4
    with SessionStore(path) as again:  # reopening applies nothing twice
        assert len(list(again.db["migrations"].rows)) == len(MIGRATIONS) == 4


def test_a_beamwise_without_m004_refuses_a_database_that_has_it(tmp_path: Path, monkeypatch) -> None:
    """An older Beamwise would give a deleted id again: it refuses the file as a newer schema instead."""
    path = tmp_path / "s.db"
    SessionStore(path).close()
    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:3])
    monkeypatch.setattr(migrations, "SCHEMA_VERSION", 3)
    conn = sqlite3.connect(path)
    try:
        refused = unusable_schema(conn, path, table_names(conn))
    finally:
        conn.close()
    assert isinstance(refused, StoreTooNew) and "schema version 4" in str(refused)


@pytest.mark.parametrize("reading_only", [True, False])
def test_a_database_only_read_needs_no_m004(tmp_path: Path, monkeypatch, reading_only: bool) -> None:
    """m004 is for writes: a database this Beamwise may not write (opened to be read only, or a read-only file)
    that lacks it is still read, and not changed."""
    path = tmp_path / "old.db"
    shutil.copy(OLD_DB, path)
    with monkeypatch.context() as older:  # the database as the last release left it: m001 to m003
        older.setattr("app.store.MIGRATIONS", MIGRATIONS[:3])
        older.setattr("app.store.SCHEMA_VERSION", 3)
        SessionStore(path).close()
    before = path.read_bytes()
    if not reading_only:
        monkeypatch.setattr("app.store.writable", lambda _path: False)  # as a read-only file, also for root
    with SessionStore(path, read_only=reading_only) as store:
        assert store.read_only and [s["id"] for s in store.list_sessions()] == [3, 2, 1] and store.schema_version == 3
    assert path.read_bytes() == before
