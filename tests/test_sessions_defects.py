"""`beamwise sessions ...` defects a new user's walkthrough found: exports over FIFOs, links and devices, ids past
SQLite's integers, Ctrl+D at the delete question, files that are no database, a mistyped --db, import messages."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from app.cli import main
from app.recorder import SessionRecorder
from app.store import SessionStore
from app.store_errors import SessionNotFound
from benchmarks.fake_search import fake_run

HUGE = "99999999999999999999"  # past SQLite's largest INTEGER, 2**63 - 1
posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and device nodes are POSIX")


def record(store: SessionStore, question: str, previous: int | None = None) -> int:
    recorder = SessionRecorder(store, previous=previous)
    for event in fake_run(question):
        recorder.write(event)
    return recorder.session_id


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    with SessionStore(path) as store:
        record(store, "How fast is the train?")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as stop:  # argparse's refusals
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> bool:
    return err.startswith("beamwise: error: ") and err.count("\n") == 1 and "Traceback" not in err


# ---------------------------------------------------------------- 1: exports over what is not a plain file


@posix_only
def test_an_export_into_a_fifo_is_written_into_it_and_it_stays_a_fifo(db: Path, tmp_path: Path, capsys) -> None:
    """`-o fifo --force` renamed a plain file over the FIFO: it became a file and its reader got nothing; without
    --force it was refused as "already exists" (so was /dev/stdout), though nothing is replaced."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()), daemon=True)
    reader.start()
    code, out, err = run(capsys, "sessions", "export", "1", "-o", str(fifo), "--db", str(db))
    _release(fifo)
    reader.join(timeout=10)
    assert code == 0 and out == "" and f"wrote session 1 as md to {fifo}" in err  # the stream holds the export only
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert read and read[0].decode("utf-8").startswith("# How fast is the train?")


def _release(fifo: Path) -> None:
    """End a reader still waiting on `fifo` for a writer (an export that never opened it): it reads nothing."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # no reader is waiting: nothing to release (or the FIFO was replaced by a file)
        pass


def test_an_export_to_a_symlink_replaces_the_file_it_points_to_and_keeps_the_link(db: Path, tmp_path: Path,
                                                                                 capsys) -> None:
    """`-o link.md --force` replaced the link with a file and left the file it pointed to as it was."""
    target, link = tmp_path / "target.md", tmp_path / "link.md"
    target.write_text("mine", encoding="utf-8")
    link.symlink_to(target.name)
    code, _, err = run(capsys, "sessions", "export", "1", "-o", str(link), "--db", str(db))
    assert code == 2 and "already exists" in err and target.read_text(encoding="utf-8") == "mine"
    code, out, _ = run(capsys, "sessions", "export", "1", "-o", str(link), "--force", "--db", str(db))
    assert code == 0 and f"to {link}" in out
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_text(encoding="utf-8").startswith("# How fast is the train?")
    assert not list(tmp_path.glob("*.part"))  # no temporary file left beside either


@posix_only
def test_an_export_into_a_character_device_writes_into_it_and_a_full_one_is_an_error(db: Path, device_nodes,
                                                                                      capsys) -> None:
    """As root, `-o /dev/null --force` replaced /dev/null with a plain file, and `-o /dev/full --force` "succeeded".
    Nodes of the same devices made under the test's folder (never /dev itself): null takes the export, full
    says there is no space, and both stay device nodes."""
    null, full = device_nodes
    code, _, err = run(capsys, "sessions", "export", "1", "-o", str(null), "--force", "--db", str(db))
    assert code == 0 and "wrote session 1" in err
    code, _, err = run(capsys, "sessions", "export", "1", "-o", str(full), "--db", str(db))
    assert code == 2 and one_line(err) and "No space left on device" in err and "did not finish" in err
    assert stat.S_ISCHR(os.lstat(null).st_mode) and stat.S_ISCHR(os.lstat(full).st_mode)


@posix_only
def test_an_export_to_a_socket_is_refused_and_leaves_it(db: Path, tmp_path: Path, capsys) -> None:
    """A socket (or a block device) is no file to write an export into: it was replaced like a file."""
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))
        code, _, err = run(capsys, "sessions", "export", "1", "-o", str(path), "--force", "--db", str(db))
    assert code == 2 and one_line(err) and "it is a socket; nothing was written" in err
    assert stat.S_ISSOCK(os.lstat(path).st_mode)


# ---------------------------------------------------------------- 2: ids and limits past SQLite's integers


@pytest.mark.parametrize("argv", [
    ("sessions", "show", HUGE),
    ("sessions", "export", HUGE),
    ("sessions", "rename", HUGE, "title"),
    ("sessions", "delete", HUGE, "--yes"),
    ("sessions", "list", "--limit", HUGE),
    ("run", "--session", HUGE, "a question"),
    ("plan", "--session", HUGE, "a question"),
])  # fmt: skip
def test_an_id_or_limit_past_sqlites_integers_is_one_line_and_exit_2(db: Path, capsys, argv) -> None:
    """`sessions show 99999999999999999999` (and export, rename, delete, list --limit, run and plan --session)
    ended in SQLite's "OverflowError: Python int too large to convert to SQLite INTEGER" traceback."""
    code, out, err = run(capsys, *argv, "--db", str(db))
    assert code == 2 and out == "" and one_line(err), err
    assert HUGE in err


def test_the_store_says_no_session_for_an_id_past_sqlites_integers(db: Path) -> None:
    """The window and `plan --session` ask the store directly: an id SQLite cannot hold has no session."""
    with SessionStore(db) as store, pytest.raises(SessionNotFound, match="there is no session"):
        store.get_session(2**70)


def test_a_missing_session_names_the_db_it_was_looked_for_in(db: Path, capsys) -> None:
    """`sessions show --db a.db 999` said to run `beamwise sessions list`, which lists the default database."""
    code, _, err = run(capsys, "sessions", "show", "999", "--db", str(db))
    assert code == 2 and one_line(err) and f"`beamwise sessions list --db {db}`" in err


# ---------------------------------------------------------------- 3 and 11: the delete question


def test_ctrl_d_at_the_delete_question_keeps_the_session(db: Path, capsys, monkeypatch) -> None:
    """Ctrl+D (end of input) at `[y/N]` ended in an EOFError traceback; it is a no, as Enter is."""
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)

    def end_of_input(prompt: str) -> str:
        raise EOFError

    monkeypatch.setattr("builtins.input", end_of_input)
    code, out, err = run(capsys, "sessions", "delete", "1", "--db", str(db))
    assert code == 1 and out.strip() == "kept it" and err == ""
    with SessionStore(db) as store:
        assert store.get_session(1)["question"] == "How fast is the train?"


def test_deleting_a_turn_others_follow_is_refused_before_the_question(db: Path, capsys, monkeypatch) -> None:
    """`sessions delete` of a turn that later turns follow asked [y/N] and refused only after the user's y."""
    with SessionStore(db) as store:
        record(store, "And in m/s?", previous=1)
    asked: list[str] = []
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or "y")
    code, _, err = run(capsys, "sessions", "delete", "1", "--db", str(db))
    assert code == 2 and one_line(err) and "Delete the later turns first" in err and asked == []


# ---------------------------------------------------------------- 4: a file that is no database


@pytest.mark.parametrize(("content", "looks"), [
    (b"# My notes\n\nnothing here is SQLite\n", "text"),
    (b'{"format": "beamwise-session", "version": 1}', "JSON (a session export?)"),
    (b"<!DOCTYPE html><html></html>", "HTML or XML"),
    (bytes(range(256)) * 8, "binary data"),
    (b"\x00" * 40 + b"text after NUL bytes", "binary data"),  # NUL decodes as UTF-8: it was called "text"
])  # fmt: skip
def test_a_file_that_is_no_sqlite_database_is_not_called_damaged_nor_moved_aside(tmp_path: Path, capsys, content,
                                                                                 looks) -> None:
    """`sessions move-aside --db notes.md` renamed the notes to notes.md.damaged-...; `sessions list --db
    export.json` called the export a damaged database and said to move it aside."""
    path = tmp_path / "notes.md"
    path.write_bytes(content)
    code, _, err = run(capsys, "sessions", "list", "--db", str(path))
    assert code == 2 and one_line(err) and f"is not a session database: it holds {looks}, not SQLite data" in err
    assert "damaged" not in err and "move-aside" not in err
    for force in ([], ["--force"]):
        code, _, err = run(capsys, "sessions", "move-aside", *force, "--db", str(path))
        assert code == 2 and one_line(err) and "nothing was moved" in err
    assert path.read_bytes() == content and [p.name for p in tmp_path.iterdir()] == ["notes.md"]


@pytest.mark.parametrize("wreck", ["magic", "first page"])
def test_a_database_whose_header_is_damaged_is_damage_and_moves_aside(db: Path, capsys, wreck) -> None:
    """Random first 16 bytes were called 'binary data' and a zeroed first page 'text': "not a session database",
    so `move-aside` refused it (also with --force) and no command could start a fresh database."""
    with db.open("r+b") as handle:
        handle.write(bytes(range(7, 23)) if wreck == "magic" else bytes(4096))
    code, _, err = run(capsys, "sessions", "list", "--db", str(db))
    assert code == 2 and one_line(err) and f"the session database {db} is damaged" in err and "move-aside" in err
    code, out, _ = run(capsys, "sessions", "move-aside", "--db", str(db))
    assert code == 0 and "moved" in out and not db.exists()
    assert len(list(db.parent.glob("s.db.damaged-*"))) == 1


def test_anything_at_the_default_databases_path_is_a_damaged_database(tmp_path: Path, capsys,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Beamwise made that file, so whatever it holds now is damage: "not a session database ... Check the --db
    path" was said to a user who gave no --db, and move-aside refused it, leaving no way to a fresh database."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path))
    default = tmp_path / "sessions.db"
    default.write_bytes(b"# not SQLite\n")
    code, _, err = run(capsys, "sessions", "list")
    assert code == 2 and one_line(err) and f"the session database {default} is damaged (it holds text" in err
    assert "--db path" not in err
    code, out, _ = run(capsys, "sessions", "move-aside")
    assert "moved" in out
    assert code == 0 and not default.exists()
    assert run(capsys, "sessions", "list")[:2] == (0, "no sessions\n")


# ---------------------------------------------------------------- 5: a mistyped --db


@pytest.mark.parametrize("argv", [
    ("sessions", "list"),
    ("sessions", "list", "train"),
    ("sessions", "show", "1"),
    ("sessions", "export", "1"),
    ("sessions", "rename", "1", "title"),
    ("sessions", "delete", "1", "--yes"),
])  # fmt: skip
def test_a_command_that_reads_makes_no_database_where_the_db_is_not(tmp_path: Path, capsys, argv) -> None:
    """`sessions list --db nonexist.db` made an empty database there and said "no sessions", exit 0."""
    path = tmp_path / "nonexist.db"
    code, out, err = run(capsys, *argv, "--db", str(path))
    assert code == 2 and out == "" and one_line(err) and f"there is no session database at {path}" in err
    assert list(tmp_path.iterdir()) == []


def test_an_import_still_starts_a_new_database(db: Path, tmp_path: Path, capsys) -> None:
    """Import (like run) adds a session, so a --db that is not there is where it starts one."""
    exported, fresh = tmp_path / "s.json", tmp_path / "new.db"
    assert run(capsys, "sessions", "export", "1", "-o", str(exported), "--db", str(db))[0] == 0
    code, out, _ = run(capsys, "sessions", "import", str(exported), "--db", str(fresh))
    assert code == 0 and "as session 1" in out and fresh.is_file()


# ---------------------------------------------------------------- 6 and 7: what import says


@pytest.mark.parametrize(("key", "value", "said"), [
    ("steps", 2**70, "field 'steps' should be int from -2**63 to 2**63-1 (what SQLite holds), not 11805916207"),
    ("score", float("inf"), "field 'score' should be a finite number, not inf"),
    ("title", "x\ud800", "field 'title' should be valid Unicode text, not 'x\\ud800' (it holds a lone surrogate)"),
    ("created", "not a date", "field 'created' should be a date and time such as 2026-12-07T07:22:15+00:00"),
])  # fmt: skip
def test_an_import_says_what_is_wrong_with_a_value(db: Path, tmp_path: Path, capsys, key, value, said) -> None:
    """Import said "should be int, not int (1180591620717411303424)", "should be float, not float (inf)" and
    "should be str, not str ('x\\ud800')"; and it took "created": "not a date", which then sorted as the newest
    session and was shown as its date."""
    exported = tmp_path / "s.json"
    assert run(capsys, "sessions", "export", "1", "-o", str(exported), "--db", str(db))[0] == 0
    dump = json.loads(exported.read_text(encoding="utf-8"))
    dump["session"][key] = value
    exported.write_text(json.dumps(dump), encoding="utf-8")
    code, out, err = run(capsys, "sessions", "import", str(exported), "--db", str(db))
    assert code == 2 and out == "" and one_line(err) and said in err, err
    with SessionStore(db) as store:
        assert [s["id"] for s in store.list_sessions()] == [1]  # nothing written
