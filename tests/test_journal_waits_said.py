"""What a run kept in a journal is told, and what later commands say of it.

A run into a database it can only read went to its journal and promised it "is saved into the database the next
time Beamwise opens it", but every later command opens a read-only database to read it only and imports nothing:
`sessions list` went on without the run, not a word said. And a run whose journal was saved at its own end (the
database locked during the run, free at its end) ended without the follow-up line a recorded run ends with."""

from __future__ import annotations

from pathlib import Path

import pytest

import app.journal_import
import app.store
from app.cli import main
from app.run_cli import _drive, _open_recorder
from app.store import SessionStore
from tests.test_faults import TINY, HeldLock, fake


@pytest.fixture
def db(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(app.store, "DEFAULT_BUSY_TIMEOUT", 0.2)  # a locked write gives up quickly here
    path = tmp_path / "s.db"
    with SessionStore(path) as store:
        store.create_session({"question": "q", "status": "finished"})
    return path


def read_only(monkeypatch) -> None:
    """The database as a user who may not write it meets it (root writes every file: as if it could not)."""
    monkeypatch.setattr(app.store, "writable", lambda path: False)
    monkeypatch.setattr(app.journal_import, "writable", lambda path: False, raising=False)


def test_a_run_into_a_read_only_database_says_it_waits_until_the_database_can_be_written(db, monkeypatch,
                                                                                       capsys) -> None:
    read_only(monkeypatch)
    assert main(["run", "What is 2+3?", *TINY, "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert "the next time Beamwise opens it" not in err
    assert "is saved into the database only once it can be written" in err
    assert "until then every command reads the database without this run" in err


def test_a_read_of_a_read_only_database_names_the_journals_waiting_for_it(db, monkeypatch, capsys) -> None:
    read_only(monkeypatch)
    for question in ("What is 2+3?", "And 3+4?"):
        assert main(["run", question, *TINY, "--db", str(db)]) == 0
    journals = sorted((db.parent / "data" / "journals").glob("*.journal.jsonl"))
    journals = journals or sorted(db.parent.glob("*.journal.jsonl"))
    assert len(journals) == 2
    capsys.readouterr()
    assert main(["sessions", "list", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert "2 runs kept in the journals" in err and all(str(path) in err for path in journals)
    assert "are saved into the database only once it can be written" in err


def test_a_run_whose_journal_is_saved_at_its_end_ends_with_the_follow_up_line(db, capsys) -> None:
    """Locked from step 2 on, free again before the run's end: its journal is saved at the end, as session 2."""
    args = type("Args", (), {"no_save": False, "db": str(db), "json": False})()
    held = []

    def events(should_stop):
        for event in fake(3):
            if event.type == "step_started" and event.step == 2:
                held.append(HeldLock(db))
            if event.type == "run_finished":
                held[0].release()
            yield event

    assert _drive(args, _open_recorder(args), events) == 0
    err = capsys.readouterr().err
    assert "into" in err and "as session 2" in err
    assert err.rstrip().splitlines()[-1] == (f'beamwise: recorded as session 2; ask a follow-up with: beamwise run '
                                             f'--session 2 --db {db} "..."')



def test_an_eval_into_a_read_only_database_says_its_runs_wait_until_it_can_be_written(db, monkeypatch, capsys,
                                                                                    tmp_path: Path) -> None:
    """eval's closing line promised the runs "are saved into it the next time Beamwise opens it", as run's did."""
    import app.store_file

    read_only(monkeypatch)
    monkeypatch.setattr(app.store_file, "writable", lambda path: False)
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"question": "What is 2+3?", "answer": "5"}\n{"question": "And 3+4?", "answer": "7"}\n')
    assert main(["eval", str(problems), *TINY, "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert "the next time Beamwise opens it" not in err
    assert "(it can only be read): 2 runs of this eval are kept in run journals" in err
    assert "are saved into the database only once it can be written" in err
