"""Reading a session database leaves nothing beside it that the read made. SQLite makes a WAL database's -wal and
-shm files even to read it, and a read-only connection never deletes them: a read of a read-only file left them
read-only (its mode), and once the user made the file writable, as the refusal advised, every write was still
refused with "the folder ... or the file is read-only", which neither was. A write such stale files keep out now
names them; and a damaged database that `sessions list` refused keeps no -wal or -shm the read made either."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from app.cli import main
from app.store import SessionStore
from app.store_file import absent_side_files, close_read_only, connect_read_only
from tests.test_damaged_wal_untouched import LEAF, PAGE
from tests.test_sessions_cli import recorded
from tests.test_store_access import NOBODY, as_another_user

SIDES = ("-wal", "-shm")

CHILD = """
import json, os, sqlite3, sys
from app.cli import main
db = sys.argv[1]
seen = {}
os.chmod(db, 0o444)
seen["list"] = main(["sessions", "list", "--db", db])
seen["left"] = sorted(os.listdir(os.path.dirname(db)))
os.chmod(db, 0o644)  # as the refusal of a write to a read-only file advises
seen["rename"] = main(["sessions", "rename", "1", "Renamed", "--db", db])
os.chmod(db, 0o444)  # an earlier Beamwise's read of the read-only file left its side files read-only
reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
reader.execute("SELECT count(*) FROM sessions").fetchone()
reader.close()
os.chmod(db, 0o644)
print("stale:", file=sys.stderr, flush=True)
seen["stale"] = main(["sessions", "rename", "1", "Again", "--db", db])
print(json.dumps(seen))
"""


def side_files(db: Path) -> list[str]:
    return [db.name + tail for tail in SIDES if db.with_name(db.name + tail).exists()]


def test_a_read_of_a_file_no_one_may_write_makes_no_file_beside_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    db = recorded(tmp_path / "s.db")
    db.chmod(0o444)
    made = absent_side_files(db)
    conn = connect_read_only(db, 1.0)
    assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (1,)
    close_read_only(conn, db, made)
    assert side_files(db) == []
    with SessionStore(db, read_only=True) as store:
        assert len(store.list_sessions()) == 1
    assert side_files(db) == []


def test_a_read_of_a_writable_file_still_sees_its_wal(tmp_path: Path, monkeypatch) -> None:
    """A read-only connection reads the WAL beside the file, and leaves a WAL that holds sessions where it is."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    db = recorded(tmp_path / "s.db")
    writer = SessionStore(db)
    try:
        writer.query("PRAGMA wal_autocheckpoint=0")
        writer.create_session({"question": "Only in the WAL", "status": "finished"})
        db.chmod(0o444)
        conn = connect_read_only(db, 1.0)
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (2,)
        close_read_only(conn, db, [])
        assert side_files(db) != []  # the writer's, holding a session
    finally:
        db.chmod(0o644)
        writer.close()


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_a_database_made_writable_after_a_read_takes_writes_and_stale_side_files_are_named() -> None:
    """As the walkthrough met it, as a user root's permissions do not skip (uid nobody when the tests run as root):
    `sessions list` of a read-only g.db, chmod 644, `sessions rename`."""
    folder = Path(tempfile.mkdtemp())
    try:
        folder.chmod(0o777)
        db = recorded(folder / "g.db")
        if os.geteuid() == 0:
            os.chown(db, NOBODY, NOBODY)
        done, seen = as_another_user(CHILD, db, folder)
        assert seen["list"] == 0 and "g.db-shm" not in seen["left"] and "g.db-wal" not in seen["left"]
        assert seen["rename"] == 0, done.stderr
        stale = done.stderr.split("stale:", 1)[1]
        assert seen["stale"] == 2
        assert f"{db}-shm beside it is read-only" in stale and "the folder" not in stale
        assert "Delete it while no Beamwise or other program has the database open, or make it writable" in stale
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_damaged_database_refused_by_sessions_list_keeps_no_file_the_read_made(tmp_path: Path, monkeypatch,
                                                                                 capsys) -> None:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    db = tmp_path / "m.db"
    with SessionStore(db) as store:
        for n in range(40):
            store.create_session({"question": f"Question {n} " + "x" * 300, "status": "finished"})
    data = bytearray(db.read_bytes())
    page = next(n for n in range(2, len(data) // PAGE) if data[n * PAGE] == LEAF)
    data[page * PAGE:page * PAGE + 3000] = bytes(range(256)) * 11 + bytes(184)
    db.write_bytes(bytes(data))
    before = hashlib.md5(db.read_bytes()).hexdigest()
    assert main(["sessions", "list", "--db", str(db)]) == 2
    assert "is damaged" in capsys.readouterr().err
    assert side_files(db) == [] and hashlib.md5(db.read_bytes()).hexdigest() == before


def test_a_store_kept_open_on_a_read_only_file_sees_sessions_written_after_it_was_made_writable(
        tmp_path: Path, monkeypatch) -> None:
    """Read as immutable, a store kept open (as the window keeps one) listed the sessions of the moment it opened,
    and once the file had grown under it called it malformed: damaged, to be moved aside."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    db = recorded(tmp_path / "s.db")
    db.chmod(0o444)
    reader = SessionStore(db, read_only=True)  # as a user who may not write it opens it (root may)
    try:
        assert len(reader.list_sessions()) == 1
        db.chmod(0o644)
        with SessionStore(db) as writer:
            for number in range(300):
                writer.create_session({"question": f"Question {number}?", "status": "finished"})
        assert len(reader.list_sessions(limit=None)) == 301
    finally:
        reader.close()
