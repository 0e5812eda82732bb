"""What `beamwise sessions` prints, as a tester read it: the list's answer cut between whole characters with an
ellipsis, times in this computer's zone (list and show), and "1 step" for a journal of one step."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import app.formatting as fmt
from app.cli import main
from app.journal import RunJournal, header_for
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import SearchConfig
from tests.test_sessions_cli import recorded


@pytest.fixture
def db(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    return recorded(tmp_path / "s.db")


def set_column(db: Path, column: str, value: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE sessions SET {column} = ? WHERE id = 1", (value,))
    conn.close()


def listed(capsys, db: Path) -> str:
    assert main(["sessions", "list", "--db", str(db)]) == 0
    return capsys.readouterr().out.splitlines()[1]


# ---------------------------------------------------------------- the answer's cut


@pytest.mark.parametrize(("answer", "shown"), [
    ("a" * 39 + "e\u0301 and more", "a" * 39 + "…"),  # answer[:40] kept the e and lost its accent
    ("a" * 38 + "\U0001f469\u200d\U0001f469\u200d\U0001f467 family", "a" * 38 + "…"),  # [:40]: half a family
    ("short answer", "short answer"),
])  # fmt: skip
def test_the_lists_answer_is_cut_between_whole_characters_with_an_ellipsis(db, capsys, answer, shown) -> None:
    set_column(db, "answer", answer)
    line = listed(capsys, db)
    assert line.endswith(f"  -> {shown}")
    assert "\u200d" not in line and "\u0301" not in line


# ---------------------------------------------------------------- local time


def test_list_and_show_give_the_time_in_this_computers_zone(db, capsys, tokyo) -> None:
    """A run made at 14:24 UTC was listed at 14:24 in Tokyo, where it was 23:24."""
    set_column(db, "created", "2026-12-07T14:24:05+00:00")
    assert "  2026-12-07 23:24  " in listed(capsys, db)
    assert main(["sessions", "show", "1", "--db", str(db)]) == 0
    assert "\n  2026-12-07 23:24:05  finished" in capsys.readouterr().out


def test_local_time_of_times_without_a_zone_and_of_no_time(tokyo) -> None:
    assert fmt.local_time("2026-12-07T14:24:05+00:00") == "2026-12-07 23:24"
    assert fmt.local_time("2026-12-07T14:24:05-05:00", seconds=True) == "2026-12-08 04:24:05"
    assert fmt.local_time("2026-12-07T14:24:05") == "2026-12-07 14:24"  # no zone: as written
    assert fmt.local_time("0001-01-01T00:00:00+05:00") == "0001-01-01 00:00"  # before the local zone's range
    assert fmt.local_time("not a time at all") == "not a time at all"[:16]
    assert fmt.local_time(None) == ""


# ---------------------------------------------------------------- "1 step"


@pytest.mark.parametrize(("steps", "said"), [(1, "(1 step)."), (2, "(2 steps).")])
def test_an_imported_journal_says_its_steps_in_the_right_number(db, capsys, steps, said) -> None:
    written = RunJournal(db.parent, header_for(db, "2026-11-24T10:00:00", None, None))
    for number, event in enumerate(fake_run("What is 2+3?", SearchConfig(beams=2, width=2, max_steps=steps))):
        written.append(0.1 * number, ev.to_dict(event))
    written.close()
    assert main(["sessions", "list", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert f"saved the run journal {written.path.name}" in err and err.rstrip().endswith(said)
