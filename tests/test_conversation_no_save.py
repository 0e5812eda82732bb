"""A follow-up that is not saved, in a --db database: `run --session 3 "No save?" --no-save --db c.db` was refused
("--db names the database to record in, and --no-save records nothing"), though with --session --db is also where
the conversation is read from. It is taken now, and the database is only read: `SessionStore(read_only=True)`
writes nothing, no schema upgrade, no WAL switch, no interrupted marks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.cli import build_parser, main
from app.conversations import follow_up_of
from app.options import UsageError, configs_from_args
from app.recorder import SessionRecorder
from app.store import SessionStore
from app.store_errors import StoreReadOnly
from benchmarks.fake_search import fake_run
from engine import events as ev
from tests.test_sessions_cli import recorded

OLD_DB = Path(__file__).parent / "data" / "sessions_m001.db"  # written before m002: it needs an upgrade
TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "2"]


@pytest.fixture
def db(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    return recorded(tmp_path / "c.db", "What is 2+3?")


def test_no_save_with_db_is_taken_for_a_follow_up_only(db: Path) -> None:
    parser = build_parser()
    follow_up = parser.parse_args(["run", "--session", "1", "No save?", "--no-save", "--db", str(db)])
    configs_from_args(follow_up)  # no refusal: --db is read
    fresh = parser.parse_args(["run", "No save?", "--no-save", "--db", str(db)])
    with pytest.raises(UsageError, match="--no-save records nothing: give one of them"):
        configs_from_args(fresh)


def test_a_follow_up_not_saved_runs_on_the_conversation_of_its_db(db: Path, capsys) -> None:
    assert main(["run", "--session", "1", "No save?", *TINY, "--no-save", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert "follow-up: turn 2 of the conversation of session 1" in err and "recorded as" not in err
    with SessionStore(db) as store:
        assert [s["id"] for s in store.list_sessions()] == [1]


def test_a_store_opened_to_be_read_only_writes_nothing(db: Path) -> None:
    with SessionStore(db) as store:  # a run whose process is gone: any writable opening marks it interrupted
        recorder = SessionRecorder(store)
        for event in fake_run("And times 4?"):
            if isinstance(event, ev.RunStarted):
                recorder.write(event)
        with store.transaction() as conn:
            conn.execute("UPDATE sessions SET pid = 2147483646 WHERE id = 2")
    before = db.read_bytes()
    with SessionStore(db, read_only=True) as store:
        assert store.read_only and store.mark_interrupted() == []
        assert store.get_session(2)["status"] == "running"
        assert follow_up_of(store, 1)[0] == 1  # the conversation is read as `run --session` reads it
        with pytest.raises(StoreReadOnly):
            store.rename(1, "x")
    assert db.read_bytes() == before


def test_a_database_that_needs_an_upgrade_to_be_read_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    shutil.copy(OLD_DB, path)
    with pytest.raises(StoreReadOnly) as refused:
        SessionStore(path, read_only=True)
    assert "needs a schema upgrade before it can be read" in str(refused.value)
    assert f"`beamwise sessions list --db {path}`" in refused.value.user_message()
    assert path.read_bytes() == OLD_DB.read_bytes()


def test_a_follow_up_not_saved_writes_nothing_to_its_db(db: Path, capsys) -> None:
    """Not even what any opening does: a run whose process is gone stays as it was, and a database that needs a
    schema upgrade is refused, unchanged, with the way to upgrade it."""
    with SessionStore(db) as store, store.transaction() as conn:
        conn.execute("INSERT INTO sessions (title, question, created, status, pid, host, conversation_id, turn) "
                     "VALUES ('x', 'x', '2020-01-01T00:00:00+00:00', 'running', 2147483646, NULL, 2, 1)")
    before = db.read_bytes()
    assert main(["run", "--session", "1", "No save?", *TINY, "--no-save", "--db", str(db)]) == 0
    assert db.read_bytes() == before
    old = db.with_name("old.db")
    shutil.copy(OLD_DB, old)
    capsys.readouterr()
    assert main(["run", "--session", "1", "No save?", *TINY, "--no-save", "--db", str(old)]) == 2
    assert "needs a schema upgrade before it can be read" in capsys.readouterr().err
    assert old.read_bytes() == OLD_DB.read_bytes()
