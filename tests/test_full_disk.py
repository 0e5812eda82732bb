"""A full disk under the session database: the run moves to a journal in the first folder with room (beside the
database, then the user data folder's journals/), a journal whose disk fills mid-run moves whole to the next, and
when nothing can be written the run goes on unsaved and says so once. SQLite's own SQLITE_FULL is made real with
`PRAGMA max_page_count`; a journal folder without room is an injected ENOSPC."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

import app.journal
from app.cli import main
from app.journal_import import open_session_store, recorder_for
from app.store import SessionStore
from app.store_errors import StoreFull
from benchmarks.fake_search import fake_run
from engine.config import SearchConfig

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "2"]


@pytest.fixture
def db(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    path = tmp_path / "db" / "s.db"
    path.parent.mkdir()
    SessionStore(path).close()
    return path


def filled(store: SessionStore, pages: int = 2) -> SessionStore:
    """`store`, with room for only `pages` more pages: SQLite then fails a write with 'database or disk is full'."""
    used = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {used + pages}")
    return store


def no_room_in(monkeypatch, *folders: Path) -> set[Path]:
    """Journals in `folders` fail with ENOSPC; the set returned is those folders, for a test to add to mid-run."""
    line, full = app.journal.RunJournal._line, set(folders)

    def write(self, data) -> None:
        if self.path.parent in full:
            raise OSError(errno.ENOSPC, "No space left on device")
        line(self, data)

    monkeypatch.setattr(app.journal.RunJournal, "_line", write)
    return full


def record(store: SessionStore, steps: int = 6, at_step_4=lambda: None) -> tuple[list[str], object, int]:
    notes: list[str] = []
    recorder = recorder_for(store, notes.append)
    events = list(fake_run("What is 2+3?", SearchConfig(beams=2, width=2, max_steps=steps)))
    for event in events:
        if event.type == "step_started" and event.step == 4:
            at_step_4()
        recorder.write(event)  # never raises: the run goes on whatever the disk does
    recorder.close()
    return notes, recorder, len(events)


def test_sqlite_full_is_its_own_error_saying_to_free_space(db):
    with filled(SessionStore(db), pages=0) as store, pytest.raises(StoreFull, match="is full") as info:
        with store.transaction() as conn:
            conn.execute("CREATE TABLE ballast (x)")
            conn.execute("INSERT INTO ballast VALUES (zeroblob(100000))")
    assert "Free some disk space" in info.value.user_message()


def test_a_full_database_moves_the_run_to_a_journal_that_the_next_open_imports_whole(db):
    notes, recorder, count = record(filled(SessionStore(db)))
    assert recorder.journal_path is not None and recorder.journal_path.parent == db.parent
    assert "is full" in notes[0] and str(recorder.journal_path) in notes[0] and not recorder.unsaved
    recorder.store.close()
    with open_session_store(db) as store:  # room again: the journal is imported and deleted
        (session,) = store.list_sessions()
        assert session["status"] == "finished" and session["steps"] == 6
        assert len(store.events(session["id"])) == count
    assert not recorder.journal_path.exists()


def test_no_room_beside_the_database_puts_the_journal_in_the_data_folder(db, monkeypatch):
    no_room_in(monkeypatch, db.parent)
    notes, recorder, _ = record(filled(SessionStore(db)))
    assert recorder.journal_path.parent == db.parent.parent / "data" / "journals"
    assert str(recorder.journal_path) in notes[0]
    assert list(db.parent.glob("*.journal.jsonl")) == []  # the journal that failed left nothing behind
    recorder.store.close()
    with open_session_store(db) as store:
        assert store.list_sessions()[0]["steps"] == 6


def test_a_journal_whose_disk_fills_mid_run_moves_whole_to_the_next_folder(db, monkeypatch):
    full = no_room_in(monkeypatch)
    notes, recorder, count = record(filled(SessionStore(db)), at_step_4=lambda: full.add(db.parent))
    assert str(db.parent) in notes[0]  # the first journal was beside the database
    assert recorder.journal_path.parent.name == "journals" and len(notes) == 2 and "could not be written" in notes[1]
    assert list(db.parent.glob("*.journal.jsonl")) == []
    assert len(app.journal.read_journal(recorder.journal_path).events) == count
    recorder.store.close()
    with open_session_store(db) as store:
        (session,) = store.list_sessions()
        assert session["steps"] == 6 and len(store.events(session["id"])) == count


def test_with_no_room_anywhere_the_run_goes_on_unsaved_and_says_so_once(db, monkeypatch):
    no_room_in(monkeypatch, db.parent, db.parent.parent / "data" / "journals")
    notes, recorder, _ = record(filled(SessionStore(db)))
    assert recorder.unsaved and recorder.journal_path is None
    assert len(notes) == 1 and "this run is NOT being saved" in notes[0] and "No space left" in notes[0]
    recorder.store.close()


def test_the_command_line_run_prints_its_answer_and_exits_0_when_nothing_can_be_saved(db, monkeypatch, capsys):
    no_room_in(monkeypatch, db.parent, db.parent.parent / "data" / "journals")
    transaction = SessionStore.transaction

    def full_after_the_start(self):
        if self._conn.execute("SELECT count(*) FROM sessions").fetchone()[0]:
            raise StoreFull(f"the disk holding the session database {self.path} is full.")
        return transaction(self)

    monkeypatch.setattr(SessionStore, "transaction", full_after_the_start)
    assert main(["run", "What is 2+3?", *TINY, "--db", str(db)]) == 0
    captured = capsys.readouterr()
    assert "answer:" in captured.out and captured.err.count("this run is NOT being saved") == 1
