"""The session database's file, as a tester met it: a database whose first 100 bytes were overwritten is damaged
(named, moved aside), while random bytes and a PNG stay no database; a newer Beamwise's database gets advice that
works; an explicit --db in a folder that is missing, or under a file, is refused and no folder is made."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from app.cli import main
from app.db_kind import foreign_file
from app.recorder import SessionRecorder
from app.store import NotADatabase, SessionStore, StoreError
from benchmarks.fake_search import fake_run

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "1"]
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"


@pytest.fixture
def db(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    path = tmp_path / "s.db"
    with SessionStore(path) as store:
        for question in ("How fast is the train?", "Why is the sky blue?"):
            recorder = SessionRecorder(store)
            for event in fake_run(question):
                recorder.write(event)
    assert not path.with_name("s.db-wal").exists(), "the last close wrote the WAL into the file"
    return path


def exit_code(args: list[str]) -> int:
    try:
        return main(args)
    except SystemExit as exit_:
        return int(exit_.code or 0)


def header_overwritten(db: Path, seed: int) -> Path:
    with db.open("r+b") as handle:
        handle.write(random.Random(seed).randbytes(100))
    return db


# ---------------------------------------------------------------- finding 1: the header overwritten


@pytest.mark.parametrize("seed", range(5))
def test_a_database_whose_first_100_bytes_were_overwritten_is_damaged_and_moved_aside(db, capsys, seed) -> None:
    """It was "not a session database: it holds binary data", and move-aside (even --force) refused it."""
    header_overwritten(db, seed)
    assert foreign_file(db) is None
    for command in (["sessions", "list"], ["sessions", "show", "1"], ["run", "What is 2+3?", *TINY]):
        assert exit_code([*command, "--db", str(db)]) == 2
        err = capsys.readouterr().err
        assert f"the session database {db} is damaged" in err and "sessions move-aside" in err, command
        assert "not a session database" not in err
    assert SessionStore.damage(db) is not None
    assert exit_code(["sessions", "move-aside", "--db", str(db)]) == 0
    assert "moved" in capsys.readouterr().out
    assert not db.exists() and len(list(db.parent.glob("s.db.damaged-*"))) == 1


@pytest.mark.parametrize("size", [1, 16, 99, 100, 107, 108, 112, 200, 512, 4096, 70_000])
def test_random_bytes_of_any_size_stay_no_database(tmp_path, capsys, size) -> None:
    for seed in range(20):
        path = tmp_path / f"r{seed}.bin"
        path.write_bytes(random.Random(seed * 1000 + size).randbytes(size))
        assert foreign_file(path) is not None, (size, seed)
        with pytest.raises(NotADatabase):
            SessionStore.move_aside(path)
        assert path.exists()


def test_page_one_alone_or_the_schema_text_alone_is_no_database(tmp_path, db) -> None:
    """A file with a page-1 b-tree header at byte 100 but no schema text, a PNG, and a CRLF SQL text that names a
    sessions table are all refused as no database; page 1 and the schema text together are a damaged one."""
    page = bytearray(random.Random(1).randbytes(4096))
    page[100:112] = bytes([0x0D, 0, 0, 0, 1, 0x0F, 0x00, 0]) + b"\x0f\x00\x00\x00"  # one cell at 3840
    lonely = tmp_path / "page.bin"
    lonely.write_bytes(bytes(page))
    png = tmp_path / "shot.png"
    png.write_bytes(PNG + random.Random(2).randbytes(5000) + b"CREATE TABLE")
    dump = tmp_path / "dump.sql"
    dump.write_bytes(b"CREATE TABLE sessions (id INTEGER PRIMARY KEY, title TEXT, answer TEXT);\r\n" * 40)
    for path in (lonely, png, dump):
        assert foreign_file(path) is not None, path
        with pytest.raises(NotADatabase):
            SessionStore.move_aside(path)
    page[3840:3900] = b"CREATE TABLE sessions (id INTEGER PRIMARY KEY, title TEXT)".ljust(60)
    lonely.write_bytes(bytes(page))
    assert foreign_file(lonely) is None


# ---------------------------------------------------------------- finding 2: a newer Beamwise's database


def test_move_aside_of_a_newer_beamwises_database_gives_advice_that_works(db, capsys) -> None:
    """It said "not damaged" and pointed at `sessions list`, which refused the same file (newer schema)."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 999")
    conn.close()
    assert exit_code(["sessions", "list", "--db", str(db)]) == 2
    assert "newer than this Beamwise" in capsys.readouterr().err
    assert exit_code(["sessions", "move-aside", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "a newer Beamwise wrote it" in err and "Update Beamwise" in err and "--force" in err
    assert "sessions list" not in err and db.exists()
    assert exit_code(["sessions", "move-aside", "--force", "--db", str(db)]) == 0
    assert not db.exists() and len(list(db.parent.glob("s.db.damaged-*[0-9]"))) == 1


def test_move_aside_of_another_programs_database_says_so(tmp_path, capsys) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    conn.close()
    assert exit_code(["sessions", "move-aside", "--db", str(other)]) == 2
    err = capsys.readouterr().err
    assert "another program" in err and "sessions list" not in err and other.exists()


# ---------------------------------------------------------------- findings 5 and 6: --db's folder


def test_run_and_import_refuse_a_db_in_a_folder_that_does_not_exist(db, tmp_path, capsys) -> None:
    """A typo in --db's folder made that folder tree and a new database in it."""
    exported = tmp_path / "one.json"
    assert exit_code(["sessions", "export", "1", "--db", str(db), "-o", str(exported)]) == 0
    capsys.readouterr()
    typo = tmp_path / "typo" / "deeper" / "x.db"
    for command in (["run", "What is 2+3?", *TINY], ["sessions", "import", str(exported)]):
        assert exit_code([*command, "--db", str(typo)]) == 2
        err = capsys.readouterr().err
        assert f"the folder {typo.parent} does not exist" in err and "Create the folder first" in err, command
        assert not (tmp_path / "typo").exists()


def test_the_window_opens_no_store_in_a_folder_that_does_not_exist(tmp_path, capsys) -> None:
    pytest.importorskip("PySide6")
    from app.gui.launch import open_store

    assert open_store(str(tmp_path / "typo" / "x.db"), ask=False) is None
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "typo").exists()


def test_the_default_database_still_makes_its_data_folder(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "new" / "data"))
    with SessionStore() as store:
        assert store.path == tmp_path / "new" / "data" / "sessions.db" and store.path.is_file()


@pytest.mark.parametrize("under", ["x.db", "sub/x.db"])
def test_a_db_under_a_file_says_the_file_is_no_folder(db, tmp_path, capsys, under) -> None:
    """It said "[Errno 17] File exists" (run), and `sessions import` ended in an internal error."""
    exported = tmp_path / "one.json"
    assert exit_code(["sessions", "export", "1", "--db", str(db), "-o", str(exported)]) == 0
    capsys.readouterr()
    plain = tmp_path / "FILE"
    plain.write_text("notes\n")
    target = plain / under
    for command in (["run", "What is 2+3?", *TINY], ["sessions", "import", str(exported)]):
        assert exit_code([*command, "--db", str(target)]) == 2
        err = capsys.readouterr().err
        assert f"{plain} is a file, not a folder" in err and "Errno" not in err and "internal error" not in err
    assert plain.read_text() == "notes\n"
    with pytest.raises(StoreError, match="is a file, not a folder"):
        SessionStore(target)


def test_a_read_only_database_whose_header_was_overwritten_is_damaged(db, monkeypatch, capsys) -> None:
    """Opened read-only (its folder or file not writable), SQLite's "file is not a database" rose raw: an internal
    error instead of the damaged database's line."""
    import app.store

    header_overwritten(db, 7)
    monkeypatch.setattr(app.store, "_writable", lambda path: False)  # root writes everywhere: as if it could not
    assert exit_code(["sessions", "list", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert f"the session database {db} is damaged" in err and "internal error" not in err
