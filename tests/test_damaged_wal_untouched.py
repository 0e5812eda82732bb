"""A damaged database whose newest sessions are still only in its WAL is left as it was when a command refuses it:
closing the refused store was the last connection to close, so SQLite copied the WAL into the damaged file and
deleted the WAL, while the message said "it was left untouched"; `move-aside` then kept neither."""

from __future__ import annotations

import hashlib
import random
import shutil
from pathlib import Path

import pytest

from app.cli import main
from app.journal_import import open_session_store
from app.store import SessionStore
from app.store_errors import StoreDamaged

PAGE = 4096
LEAF = 0x0D  # the first byte of a table b-tree leaf page


def digest(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def wal_only_newest(tmp_path: Path) -> Path:
    """w.db as a killed writer leaves it: 40 sessions in the file, the 41st only in w.db-wal; then a b-tree page of
    the file (past page 2) overwritten with 3000 random bytes."""
    source = tmp_path / "source.db"
    with SessionStore(source) as store:
        for n in range(40):
            store.create_session({"question": f"Question {n} " + "x" * 300, "status": "finished"})
    writer = SessionStore(source)
    try:
        writer.query("PRAGMA wal_autocheckpoint=0")
        writer.create_session({"question": "Only in the WAL", "status": "finished"})
        db = tmp_path / "w.db"
        shutil.copy(source, db)
        shutil.copy(source.with_name("source.db-wal"), tmp_path / "w.db-wal")
    finally:
        writer.close()
    data = db.read_bytes()
    page = next(n for n in range(2, len(data) // PAGE) if data[n * PAGE] == LEAF)
    with db.open("r+b") as handle:
        handle.seek(page * PAGE)
        handle.write(random.Random(6).randbytes(3000))
    return db


@pytest.fixture
def db(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    return wal_only_newest(tmp_path)


def test_sessions_list_leaves_the_file_and_its_wal_as_they_were(db: Path, capsys) -> None:
    wal = db.with_name("w.db-wal")
    before = digest(db), digest(wal)
    assert main(["sessions", "list", "--db", str(db)]) == 2
    assert "is damaged" in capsys.readouterr().err
    assert wal.exists() and (digest(db), digest(wal)) == before  # before: a new file, and no WAL


def test_move_aside_then_keeps_the_wal_with_the_newest_session(db: Path, capsys) -> None:
    wal_bytes = db.with_name("w.db-wal").read_bytes()
    main(["sessions", "list", "--db", str(db)])
    assert main(["sessions", "move-aside", "--db", str(db)]) == 0
    capsys.readouterr()
    [moved] = db.parent.glob("w.db.damaged-*[0-9]")
    assert moved.with_name(moved.name + "-wal").read_bytes() == wal_bytes and not db.exists()


def test_the_windows_way_of_opening_leaves_them_too(db: Path) -> None:
    """The window opens its store through `open_session_store`; a store whose damage is found at its first write
    (`check_pages`, the window's worker) closes the same way."""
    wal = db.with_name("w.db-wal")
    before = digest(db), digest(wal)
    with pytest.raises(StoreDamaged, match="left untouched"):
        open_session_store(db)
    unchecked = SessionStore(db)
    with pytest.raises(StoreDamaged):
        unchecked.create_session({"question": "Would be written over the damage", "status": "running"})
    unchecked.close()
    assert wal.exists() and (digest(db), digest(wal)) == before


def test_a_whole_database_still_folds_its_wal_in_when_closed(tmp_path: Path) -> None:
    """Only after damage: a healthy store's last close checkpoints as before (no WAL left to grow)."""
    with SessionStore(tmp_path / "s.db") as store:
        store.create_session({"question": "Whole", "status": "finished"})
    assert not (tmp_path / "s.db-wal").exists()
