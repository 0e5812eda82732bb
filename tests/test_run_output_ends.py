"""How `beamwise run` ends where its output or its answer gives out: a reader of its output that leaves (`| head`),
and a run that finishes with a chosen path of no text."""

from __future__ import annotations

import dataclasses
import io
import sys
from pathlib import Path

import pytest

from app.cli import main
from app.run_cli import READER_LEFT, _drive, _open_recorder
from app.store import SessionStore
from tests.test_faults import fake


@pytest.fixture
def db(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "s.db"


def args_for(db: Path, json_lines: bool = False):
    return type("Args", (), {"no_save": False, "db": str(db), "json": json_lines})()


def status_of(db: Path, session_id: int) -> str:
    with SessionStore(db) as store:
        return store.get_session(session_id)["status"]


class LeavingReader(io.StringIO):
    """Standard output whose reader leaves after `lines` lines, as `| head -n lines` does."""

    def __init__(self, lines: int) -> None:
        super().__init__()
        self.left = lines

    def write(self, text: str) -> int:
        if self.left <= 0:
            raise BrokenPipeError(32, "Broken pipe")
        self.left -= text.count("\n")
        return super().write(text)


@pytest.mark.parametrize("json_lines", [False, True])
def test_a_reader_that_leaves_stops_the_search_recorded_cancelled(db, monkeypatch, capsys, json_lines) -> None:
    """`run ... | head -3` ended with exit 0 and no word, its session left `running` (later `interrupted`)."""
    args = args_for(db, json_lines)
    monkeypatch.setattr(sys, "stdout", LeavingReader(3))
    assert _drive(args, _open_recorder(args), lambda should_stop: fake(4)) == READER_LEFT
    err = capsys.readouterr().err
    assert "the output's reader closed it (a pipe such as `| head`), so the search stopped before its first step" in err
    assert err.rstrip().splitlines()[-1].startswith("beamwise: recorded as session 1, cancelled after step")
    assert status_of(db, 1) == "cancelled"


def test_a_reader_that_leaves_after_the_end_was_recorded_changes_nothing(db, monkeypatch, capsys) -> None:
    events = list(fake(2))
    args = args_for(db, json_lines=True)
    monkeypatch.setattr(sys, "stdout", LeavingReader(len(events) - 1))  # the last line, run_finished, is refused
    assert _drive(args, _open_recorder(args), lambda should_stop: iter(events)) == 0
    assert status_of(db, 1) == "finished"
    assert "the output's reader closed it" not in capsys.readouterr().err


def test_a_run_that_finished_with_no_answer_offers_no_follow_up(db, capsys) -> None:
    """Its chosen path had no text (the model ended it at once): the follow-up line it printed was then refused
    ("finished without an answer"), and `sessions show` said "(none: the run did not finish)" beside "finished"."""
    events = [dataclasses.replace(e, answer="") if e.type == "run_finished" else e for e in fake(2)]
    args = args_for(db)
    assert _drive(args, _open_recorder(args), lambda should_stop: iter(events)) == 0
    err = capsys.readouterr().err
    assert "ask a follow-up with" not in err
    assert "its chosen path has no text (the model ended it at once), so there is no answer to follow up" in err
    assert main(["sessions", "show", "1", "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert "(no answer: the chosen path has no text (the model ended it at once))" in shown
    assert "did not finish" not in shown


def test_a_reader_of_both_outputs_that_leaves_still_gets_the_status(db, monkeypatch) -> None:
    """`run ... 2>&1 | head -3`: the line saying why went to the closed pipe too, and the command exited 0."""
    args = args_for(db)
    monkeypatch.setattr(sys, "stdout", LeavingReader(3))
    monkeypatch.setattr(sys, "stderr", LeavingReader(0))
    assert _drive(args, _open_recorder(args), lambda should_stop: fake(4)) == READER_LEFT
    assert status_of(db, 1) == "cancelled"
