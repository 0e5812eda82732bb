"""Two faults of reading or refusing to write a session database. A read of a malformed WAL database (its first
read fails) left its connection open and the -wal and -shm files it made beside the file, and `sessions move-aside`
carried them along. A write refused for a read-only file in a writable folder sent the user to make the folder
writable: the refusal now names the part that is read-only, in the words the run's journal warning uses."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest

from app import store_file
from app.cli import main
from app.store import SessionStore
from app.store_errors import StoreDamaged, StoreReadOnly
from tests.test_conversation_no_save import OLD_DB
from tests.test_sessions_cli import recorded
from tests.test_store_access import NOBODY, as_another_user

PAGE = 4096


def side_files(db: Path) -> list[str]:
    return sorted(path.name for path in db.parent.iterdir() if path.name.endswith(("-wal", "-shm")))


def digest(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture
def malformed(tmp_path: Path, monkeypatch) -> Path:
    """As the walkthrough made it: a copy of a WAL database with sessions, cut to its first 12 pages, whose first
    read (the schema's) fails as "database disk image is malformed", a plain DatabaseError."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    with SessionStore(tmp_path / "whole.db") as store:
        for number in range(60):
            store.create_session({"question": f"Question {number} " + "x" * 600, "status": "finished"})
    db = tmp_path / "dbs" / "clean.db"
    db.parent.mkdir()
    source, copy = sqlite3.connect(tmp_path / "whole.db"), sqlite3.connect(db)
    source.backup(copy)
    copy.close()
    source.close()
    assert db.stat().st_size > 12 * PAGE
    with open(db, "r+b") as file:
        file.truncate(12 * PAGE)
    probe = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        with pytest.raises(sqlite3.DatabaseError, match="malformed"):
            probe.execute("SELECT count(*) FROM sqlite_master").fetchone()
    finally:
        probe.close()
    for tail in ("-wal", "-shm"):  # what that probe made
        db.with_name(db.name + tail).unlink(missing_ok=True)
    return db


def test_a_look_at_a_malformed_database_leaves_nothing_beside_it(malformed: Path) -> None:
    before = digest(malformed)
    assert "malformed" in store_file.damage(malformed)
    assert side_files(malformed) == []
    assert digest(malformed) == before


def test_a_store_opened_to_read_a_malformed_database_leaves_nothing_beside_it(malformed: Path) -> None:
    before = digest(malformed)
    with pytest.raises(StoreDamaged):
        SessionStore(malformed, read_only=True)
    assert side_files(malformed) == []
    assert digest(malformed) == before


def test_move_aside_of_a_malformed_database_moves_only_the_file(malformed: Path, capsys) -> None:
    before = digest(malformed)
    assert main(["sessions", "move-aside", "--db", str(malformed)]) == 0
    assert "moved" in capsys.readouterr().out
    [moved] = list(malformed.parent.iterdir())
    assert moved.name.startswith("clean.db.damaged-")
    assert digest(moved) == before


def test_a_failed_first_read_closes_its_connection(malformed: Path, monkeypatch) -> None:
    """The connection whose first read failed was left open (closed by the garbage collector, whenever)."""
    opened: list[sqlite3.Connection] = []
    connect = sqlite3.connect

    def remembered(*args, **kwargs):
        opened.append(connect(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(sqlite3, "connect", remembered)
    with pytest.raises(sqlite3.DatabaseError):
        store_file.connect_read_only(malformed, 1.0)
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        opened[0].execute("SELECT 1")


# ---------------------------------------------------------------- which part is read-only


@pytest.fixture
def db(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "w").mkdir()
    return recorded(tmp_path / "w" / "ro.db")


def read_only_as_for_a_user(monkeypatch, *read_only: Path) -> None:
    """os.access says these paths cannot be written, as it says to a user who may not (root may write any file)."""
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (not (mode & os.W_OK and Path(path) in read_only)
                                                                 and access(path, mode, **kw)))


def refusal_of_rename(db: Path, capsys) -> str:
    assert main(["sessions", "rename", "1", "New title", "--db", str(db)]) == 2
    return capsys.readouterr().err


def test_a_read_only_file_in_a_writable_folder_is_named_as_the_file(db, monkeypatch, capsys) -> None:
    read_only_as_for_a_user(monkeypatch, db)
    err = refusal_of_rename(db, capsys)
    assert f"the session database {db} can only be read: the file {db} is read-only; nothing was written." in err
    assert f"Make the file {db} writable" in err
    assert "folder" not in err


def test_a_read_only_folder_is_named_as_the_folder(db, monkeypatch, capsys) -> None:
    read_only_as_for_a_user(monkeypatch, db.parent)
    err = refusal_of_rename(db, capsys)
    assert f"can only be read: the folder {db.parent} is read-only" in err
    assert f"Make the folder {db.parent} writable" in err
    assert "the file" not in err


def test_a_read_only_file_and_folder_are_both_named(db, monkeypatch, capsys) -> None:
    read_only_as_for_a_user(monkeypatch, db, db.parent)
    err = refusal_of_rename(db, capsys)
    assert f"can only be read: the file {db} and the folder {db.parent} are read-only" in err


CHILD = """
import json, os, sys
from app.cli import main
db = sys.argv[1]
os.chmod(db, 0o444)
print(json.dumps({"rename": main(["sessions", "rename", "1", "New title", "--db", db])}))
"""


def test_a_read_only_file_as_another_user_is_named_as_the_file() -> None:
    """As the walkthrough met it, as a user root's permissions do not skip (uid nobody when the tests run as root)."""
    folder = Path(tempfile.mkdtemp())
    try:
        folder.chmod(0o777)
        db = recorded(folder / "ro.db")
        if os.geteuid() == 0:
            os.chown(db, NOBODY, NOBODY)
        done, seen = as_another_user(CHILD, db, folder)
        assert seen["rename"] == 2
        assert f"can only be read: the file {db} is read-only" in done.stderr
        assert f"Make the file {db} writable" in done.stderr and "folder" not in done.stderr
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_read_only_file_that_needs_an_upgrade_is_named_as_the_file(tmp_path: Path, monkeypatch) -> None:
    """The same words for the refusal of a schema upgrade, which said "the folder ... or the file is read-only"."""
    path = tmp_path / "old.db"
    shutil.copy(OLD_DB, path)
    read_only_as_for_a_user(monkeypatch, path)
    with pytest.raises(StoreReadOnly) as refused:
        SessionStore(path)
    said = refused.value.user_message()
    assert f"needs a schema upgrade, but the file {path} is read-only; it was not changed." in said
    assert f"Make the file {path} writable" in said and "folder" not in said
    assert path.read_bytes() == OLD_DB.read_bytes()
