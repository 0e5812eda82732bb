"""`beamwise sessions ...` through app.cli.main: output, exit codes and one-line errors."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest

from app.cli import main
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run


def recorded(path: Path, *questions: str) -> Path:
    """A session database at `path` with one fake run of each question (one, "How fast is the train?", if none)."""
    with SessionStore(path) as store:
        for question in questions or ("How fast is the train?",):
            recorder = SessionRecorder(store)
            for event in fake_run(question):
                recorder.write(event)
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return recorded(tmp_path / "s.db", "How fast is the train?", "Why is the sky blue?")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_and_search(db: Path, capsys) -> None:
    code, out, _ = run(capsys, "sessions", "list", "--db", str(db))
    assert code == 0
    lines = out.splitlines()
    assert lines[1].split()[0] == "2" and "Why is the sky blue?" in lines[1] and "finished" in lines[1]
    assert "How fast is the train?" in lines[2] and "80 km/h" in lines[2]
    code, out, _ = run(capsys, "sessions", "list", "SKY", "--db", str(db))
    assert code == 0 and len(out.splitlines()) == 2 and "sky" in out
    code, out, _ = run(capsys, "sessions", "list", "nothing like this", "--db", str(db))
    assert code == 0 and "no sessions matching" in out


def test_a_list_cut_by_its_limit_says_so_on_stderr(db: Path, capsys) -> None:
    code, out, err = run(capsys, "sessions", "list", "--db", str(db), "--limit", "1")
    assert code == 0 and len(out.splitlines()) == 2 and "the newest 1 are listed; more sessions match" in err
    code, out, err = run(capsys, "sessions", "list", "--db", str(db), "--limit", "2")
    assert len(out.splitlines()) == 3 and err == ""


def test_show(db: Path, capsys) -> None:
    code, out, _ = run(capsys, "sessions", "show", "1", "--db", str(db))
    assert code == 0
    assert "session 1: How fast is the train?" in out and "policy lbs" in out
    assert "step 3 #11" in out and out.rstrip().endswith("The answer is 80 km/h.")


def test_export_to_files_and_stdout_then_import(db: Path, tmp_path: Path, capsys) -> None:
    for fmt in ("md", "json", "html"):
        target = tmp_path / f"out.{fmt}"
        code, out, _ = run(capsys, "sessions", "export", "1", "-o", str(target), "--db", str(db))
        assert code == 0 and f"as {fmt} to" in out and target.stat().st_size > 100
    assert (tmp_path / "out.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    code, out, _ = run(capsys, "sessions", "export", "1", "--format", "json", "--db", str(db))
    assert code == 0 and json.loads(out)["session"]["question"] == "How fast is the train?"
    code, out, _ = run(capsys, "sessions", "import", str(tmp_path / "out.json"), "--db", str(db))
    assert code == 0 and "as session 3" in out
    with SessionStore(db) as store:
        assert store.events(3) == store.events(1)


def test_a_refused_import_into_a_new_database_leaves_no_database_there(db: Path, tmp_path: Path, capsys) -> None:
    """Before, `sessions import bad.json --db new.db` refused the file and left an empty new.db behind; an
    existing database keeps its sessions, and a good import still makes the file."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a session"}', encoding="utf-8")
    new = tmp_path / "new.db"
    code, _, err = run(capsys, "sessions", "import", str(bad), "--db", str(new))
    assert code == 2 and "bad.json" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "s.db"]
    code, _, _ = run(capsys, "sessions", "import", str(bad), "--db", str(db))
    assert code == 2 and db.exists()
    with SessionStore(db) as store:
        assert len(store.list_sessions()) == 2
    good = tmp_path / "one.json"
    assert run(capsys, "sessions", "export", "1", "-o", str(good), "--db", str(db))[0] == 0
    code, out, _ = run(capsys, "sessions", "import", str(good), "--db", str(new))
    assert code == 0 and "as session 1" in out and new.exists()


def test_rename_and_delete(db: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run(capsys, "sessions", "rename", "1", "Train speed", "--db", str(db))
    assert code == 0 and "'Train speed'" in out
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    code, _, err = run(capsys, "sessions", "delete", "1", "--db", str(db))  # not a terminal: no question asked
    assert code == 2 and "add --yes" in err
    code, out, _ = run(capsys, "sessions", "delete", "1", "--yes", "--db", str(db))
    assert code == 0 and "deleted session 1 'Train speed'" in out
    with SessionStore(db) as store:
        assert [s["id"] for s in store.list_sessions()] == [2]


@pytest.mark.parametrize("argv", [
    ("sessions", "show", "99"),
    ("sessions", "delete", "99", "--yes"),
    ("sessions", "rename", "1", "   "),
    ("sessions", "list", "--limit", "0"),
    ("sessions", "export", "1", "-o", "{tmp}/missing/out.md"),
    ("sessions", "import", "{tmp}/missing.json"),
])
def test_errors_are_one_line_and_exit_2(db: Path, tmp_path: Path, capsys, argv: tuple[str, ...]) -> None:
    code, out, err = run(capsys, *(a.format(tmp=tmp_path) for a in argv), "--db", str(db))
    assert code == 2 and out == ""
    assert err.startswith("beamwise: error: ") and err.count("\n") == 1


def test_damaged_database_message_and_move_aside(tmp_path: Path, capsys) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"SQLite format 3\x00" + b"these pages are wrecked" * 100)
    code, _, err = run(capsys, "sessions", "list", "--db", str(path))
    assert code == 2 and "damaged" in err and "move-aside" in err
    code, out, _ = run(capsys, "sessions", "move-aside", "--db", str(path))
    assert code == 0 and "fresh" in out and not path.exists()
    assert len(list(tmp_path.glob("s.db.damaged-*"))) == 1
    code, _, err = run(capsys, "sessions", "list", "--db", str(path))  # the next run makes it; a list does not
    assert code == 2 and "there is no session database at" in err and not path.exists()
    code, _, err = run(capsys, "sessions", "move-aside", "--db", str(tmp_path / "none.db"))
    assert code == 2 and "no database" in err


def test_move_aside_leaves_a_whole_database_where_it_is_unless_forced(db: Path, capsys, monkeypatch) -> None:
    """`sessions move-aside` renamed a healthy database without a word, and `list` then said "no sessions"; in a
    folder it could not write, it ended in a PermissionError traceback."""
    before = db.read_bytes()
    code, _, err = run(capsys, "sessions", "move-aside", "--db", str(db))
    assert code == 2 and "is not damaged; nothing was moved" in err and "--force" in err
    assert db.read_bytes() == before
    code, out, _ = run(capsys, "sessions", "list", "--db", str(db))
    assert code == 0 and "no sessions" not in out

    def refused(self, target):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "rename", refused)
    code, _, err = run(capsys, "sessions", "move-aside", "--force", "--db", str(db))
    assert code == 2 and err.startswith(f"beamwise: error: cannot move {db} aside: Permission denied; nothing was "
                                        "moved.")
    monkeypatch.undo()
    code, out, _ = run(capsys, "sessions", "move-aside", "--force", "--db", str(db))
    assert code == 0 and not db.exists() and len(list(db.parent.glob(db.name + ".damaged-*"))) >= 1


def test_newer_schema_is_refused(db: Path, capsys) -> None:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 7")
    conn.close()
    code, _, err = run(capsys, "sessions", "list", "--db", str(db))
    assert code == 2 and "newer than this Beamwise" in err and "Update Beamwise" in err


def test_default_database_is_in_the_data_folder(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    code, out, _ = run(capsys, "sessions", "list")
    assert code == 0 and "no sessions" in out and (tmp_path / "data" / "sessions.db").exists()


def test_model_text_cannot_drive_the_terminal(tmp_path: Path, capsys) -> None:
    path = tmp_path / "s.db"
    with SessionStore(path) as store:
        store.create_session({"question": "clear\x1b[2J?", "status": "finished", "answer": "boom\x1b]0;owned\x07"})
    for command in ("list", "show"):
        code, out, _ = run(capsys, "sessions", command, *(["1"] if command == "show" else []), "--db", str(path))
        assert code == 0 and "\x1b" not in out and "\x07" not in out and "boom" in out



def test_a_carriage_return_in_model_text_is_a_line_break_as_in_the_export(tmp_path: Path, capsys) -> None:
    """`sessions show` printed a lone \r as U+FFFD where the Markdown export made it a line break: one rule now,
    and never a raw \r that writes over the line."""
    path = tmp_path / "s.db"
    with SessionStore(path) as store:
        store.create_session({"question": "q", "status": "finished", "answer": "line one\r\nline two\rthree"})
    code, out, _ = run(capsys, "sessions", "show", "1", "--db", str(path))
    assert code == 0 and "\r" not in out and "\ufffd" not in out and "line one\nline two\nthree" in out
    code, out, _ = run(capsys, "sessions", "list", "--db", str(path))
    assert code == 0 and "\r" not in out and "line one line two three" in out

WORLD = "Äpfel ΣΟΦΙΑ 苹果 🍎 עברית مرحبا नमस्ते e\u0301"


def _console(monkeypatch: pytest.MonkeyPatch, encoding: str) -> io.BytesIO:
    """stdout as a console or redirect whose encoding is `encoding` (a Windows cp1252 one), its bytes returned."""
    raw = io.BytesIO()
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(raw, encoding=encoding, write_through=True))
    return raw


def _world_db(tmp_path: Path) -> Path:
    """A store with one recorded session whose question and answer hold the world's scripts."""
    path = tmp_path / "s.db"
    with SessionStore(path) as store:
        recorder = SessionRecorder(store)
        for event in fake_run(WORLD):
            recorder.write(event)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE sessions SET answer = ?", (WORLD,))
    conn.close()
    return path


@pytest.mark.parametrize("encoding", ["cp1252", "ascii"])
def test_a_console_that_cannot_show_the_text_gets_question_marks_not_an_error(tmp_path: Path, monkeypatch,
                                                                             encoding: str) -> None:
    path = _world_db(tmp_path)
    for command in (["list"], ["list", "ΣΟΦΙΑ"], ["show", "1"]):
        raw = _console(monkeypatch, encoding)
        assert main(["sessions", *command, "--db", str(path)]) == 0
        shown = raw.getvalue().decode(encoding)
        assert ("?pfel" if encoding == "ascii" else "Äpfel") in shown and "? ?? ?" in shown


def test_an_export_on_stdout_is_utf8_whatever_the_consoles_encoding(tmp_path: Path, monkeypatch) -> None:
    path = _world_db(tmp_path)
    for fmt in ("md", "json", "html"):
        raw = _console(monkeypatch, "cp1252")
        assert main(["sessions", "export", "1", "--format", fmt, "--db", str(path)]) == 0
        assert WORLD in raw.getvalue().decode("utf-8")
