"""The session database's file, as a tester met it: a database whose first 100 bytes were overwritten is damaged
(named, moved aside), wherever its schema lies, while random bytes and a PNG stay no database; a newer Beamwise's
database gets advice that works; an explicit --db in a folder that is missing, under a file or behind a broken link,
is refused and no folder is made; a refused import leaves no database, nor the folders made for it."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

import app.db_kind
from app import store_file
from app.cli import main
from app.db_kind import SCHEMA_READ, SCHEMA_TEXT, damaged_page_one, foreign_file
from app.store import SessionStore
from app.store_errors import NotADatabase, StoreError, StoreTooNew
from tests.test_sessions_cli import recorded

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "1"]
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"


@pytest.fixture
def db(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    path = recorded(tmp_path / "s.db", "How fast is the train?", "Why is the sky blue?")
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


# ---------------------------------------------------------------- the header overwritten


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
    assert store_file.damage(db) is not None
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
            store_file.move_aside(path)
        assert path.exists()


def test_page_one_alone_or_the_schema_text_alone_is_no_database(tmp_path, db) -> None:
    """Files whose byte 100 is a leaf page's type (0x0D) and byte 107 a fragment count (60 or less), so that the later
    checks are what refuse them: a page-1 b-tree header with no schema text, a PNG holding the schema text whose cell
    pointer points before the cell content, and a CRLF SQL text that names a sessions table, its first line 100
    bytes long (its cell pointers end past its cell content). Page 1 and the schema text together are a damaged
    database."""
    page = bytearray(random.Random(1).randbytes(4096))
    page[100:112] = bytes([0x0D, 0, 0, 0, 1, 0x0F, 0x00, 0]) + b"\x0f\x00\x00\x00"  # one cell at 3840
    lonely = tmp_path / "page.bin"
    lonely.write_bytes(bytes(page))
    shot = bytearray(PNG + random.Random(2).randbytes(5000) + b"CREATE TABLE")
    shot[100:110] = bytes([0x0D, 0, 0, 0, 1, 0x10, 0x00, 0]) + b"\x08\x00"  # one cell at 2048, content from 4096
    png = tmp_path / "shot.png"
    png.write_bytes(bytes(shot))
    lines = [b"-- the sessions table, written out by hand for a bug report".ljust(100), b"-- 2026-12-07 14:24",
             *[b"CREATE TABLE sessions (id INTEGER PRIMARY KEY, title TEXT, answer TEXT);"] * 40]
    dump = tmp_path / "dump.sql"
    dump.write_bytes(b"\r\n".join(lines))
    for path, schema in ((lonely, False), (png, True), (dump, True)):
        data = path.read_bytes()
        assert data[100] == 0x0D and data[107] <= 60, path  # past the page type and the fragmented bytes
        assert (SCHEMA_TEXT in data) is schema and damaged_page_one(data) is not schema, path
        assert foreign_file(path) is not None, path
        with pytest.raises(NotADatabase):
            store_file.move_aside(path)
    page[3840:3900] = b"CREATE TABLE sessions (id INTEGER PRIMARY KEY, title TEXT)".ljust(60)
    lonely.write_bytes(bytes(page))
    assert foreign_file(lonely) is None


def tables_after_data(path: Path) -> Path:
    """A database whose 40 tables were made after 1.2 MB of rows: its schema outgrew page 1, which became an interior
    page, and the schema's rows lie on pages past the first MiB."""
    rows = random.Random(3)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE data (blob BLOB)")
        conn.executemany("INSERT INTO data VALUES (?)", [(rows.randbytes(1000),) for _ in range(1200)])
        for n in range(40):
            conn.execute(f"CREATE TABLE t{n} (id INTEGER PRIMARY KEY, {', '.join(f'c{i} TEXT' for i in range(20))})")
    conn.close()
    return path


def test_a_database_whose_schema_lies_past_the_first_mib_is_damaged_when_its_header_is_overwritten(tmp_path) -> None:
    """Its first "CREATE TABLE" was 3 MB into the file: read only up to 1 MiB, it was called "binary data", and
    move-aside refused to move it."""
    path = tables_after_data(tmp_path / "big.db")
    data = path.read_bytes()
    assert data[100] == 0x05 and data.find(SCHEMA_TEXT) > SCHEMA_READ  # page 1 interior; the schema's text far in
    header_overwritten(path, 4)
    assert foreign_file(path) is None
    assert store_file.move_aside(path).name.startswith("big.db.damaged-") and not path.exists()


@pytest.mark.parametrize("read", range(3838, 3856))
def test_the_schema_text_across_two_reads_is_found(tmp_path, monkeypatch, read) -> None:
    """The file is searched SCHEMA_READ bytes at a time: a text that two reads cut in two is still found."""
    page = bytearray(random.Random(1).randbytes(8192))
    page[100:112] = bytes([0x0D, 0, 0, 0, 1, 0x0F, 0x00, 0]) + b"\x0f\x00\x00\x00"
    page[3840:3852] = SCHEMA_TEXT
    path = tmp_path / "page.bin"
    path.write_bytes(bytes(page))
    monkeypatch.setattr(app.db_kind, "SCHEMA_READ", read)
    assert foreign_file(path) is None, read
    page[3840:3852] = bytes(12)
    path.write_bytes(bytes(page))
    assert foreign_file(path) is not None, read


# ---------------------------------------------------------------- a newer Beamwise's database


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


def test_a_migration_this_beamwise_does_not_know_is_named(db, capsys) -> None:
    """At schema version 5 it read "has schema version 5, newer than this Beamwise understands (5)"."""
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO migrations (name, applied) VALUES ('m099_future', 'x')")
    conn.close()
    with pytest.raises(StoreTooNew) as info:
        SessionStore(db)
    said = str(info.value)
    assert "m099_future" in said and "a newer Beamwise wrote it" in said and "schema version" not in said
    assert exit_code(["sessions", "move-aside", "--db", str(db)]) == 2
    assert "a newer Beamwise wrote it" in capsys.readouterr().err and db.exists()


def test_move_aside_of_another_programs_database_says_so(tmp_path, capsys) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    conn.close()
    assert exit_code(["sessions", "move-aside", "--db", str(other)]) == 2
    err = capsys.readouterr().err
    assert "another program" in err and "sessions list" not in err and other.exists()


# ---------------------------------------------------------------- --db's folder


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


@pytest.mark.parametrize("there", ["", "home", "home/data"])
def test_a_refused_import_leaves_no_database_nor_the_folders_made_for_it(tmp_path, monkeypatch, capsys, there) -> None:
    """On a fresh install (no data folder yet) a refused `sessions import` left an empty sessions.db, and the data
    folder it made; a folder that was there before stays."""
    data = tmp_path / "home" / "data"
    if there:
        (tmp_path / there).mkdir(parents=True)
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(data))
    bad = tmp_path / "bad.json"
    bad.write_text('{"title": "not an export"}')
    assert exit_code(["sessions", "import", str(bad)]) == 2
    assert "not a Beamwise session export" in capsys.readouterr().err
    assert not (data / "sessions.db").exists()
    assert (tmp_path / "home").exists() is bool(there) and data.exists() is (there == "home/data")


def link_to_nowhere(link: Path) -> Path:
    try:
        link.symlink_to(link.with_name("nowhere"), target_is_directory=True)
    except OSError as error:  # Windows without the right to make links
        pytest.skip(f"cannot make a link here: {error}")
    return link


def test_a_data_folder_or_db_folder_that_links_to_a_missing_folder_is_named(tmp_path, monkeypatch, capsys) -> None:
    """A broken link as BEAMWISE_DATA_DIR read "[Errno 17] File exists", and an explicit --db in it "the folder ...
    does not exist" about a link `ls` shows."""
    link = link_to_nowhere(tmp_path / "data")
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(link))
    said = f"{link} is a link to a missing folder ({tmp_path / 'nowhere'})"
    with pytest.raises(StoreError, match="is a link to a missing folder") as info:
        SessionStore()
    assert said in str(info.value) and "BEAMWISE_DATA_DIR" in info.value.user_message()
    for db in (link / "x.db", link / "sub" / "x.db"):
        assert exit_code(["sessions", "import", str(tmp_path / "none.json"), "--db", str(db)]) == 2
        err = capsys.readouterr().err
        assert said in err and "Errno" not in err and "does not exist" not in err and "--db path" in err
    assert exit_code(["sessions", "list"]) == 2
    assert said in capsys.readouterr().err
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()


def test_the_window_opens_no_store_in_a_folder_that_does_not_exist(tmp_path, capsys) -> None:
    pytest.importorskip("PySide6")
    from app.gui.launch import window_store

    assert window_store(str(tmp_path / "typo" / "x.db"), interactive=False) is None  # `gui` exits 2
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
    monkeypatch.setattr(app.store, "writable", lambda path: False)  # root writes everywhere: as if it could not
    assert exit_code(["sessions", "list", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert f"the session database {db} is damaged" in err and "internal error" not in err
