"""A whole session database the user cannot open to read (its permissions; on Windows, a file another program holds
open) is said to be unreadable, never damaged, and `sessions move-aside` leaves it where it is: SQLite's "unable to
open database file" was called damage, and move-aside moved a healthy database away."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import app.store
from app import store_file
from app.store import SessionStore
from app.store_errors import StoreDamaged, StoreUnreadable
from tests.test_sessions_cli import recorded
from tests.test_store_file_kinds import exit_code

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534

def as_another_user(child: str, db: Path, folder: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """Run the Python `child` on `db` as a user root's permissions do not skip (uid nobody when the tests run as
    root), with `folder`'s data folder; its output and the JSON its last line prints. Skipped where that user
    cannot run Beamwise from this checkout."""
    as_nobody = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}
    env = {**os.environ, "BEAMWISE_DATA_DIR": str(folder / "data"), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", child, str(db)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, **as_nobody)
    if done.returncode != 0 and ("ModuleNotFoundError" in done.stderr or "Permission denied" in done.stderr):
        pytest.skip(f"the other user cannot run Beamwise from {REPO}: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr
    return done, json.loads(done.stdout.splitlines()[-1])


CHILD = """
import json, sys
from app.cli import main
from app import store_file
from app.store import SessionStore
from app.store_errors import StoreError
path, seen = sys.argv[1], {}
try:
    SessionStore(path).close()
    seen["open"] = "opened"
except StoreError as error:
    seen["open"] = type(error).__name__
try:
    seen["damage"] = store_file.damage(path)
except StoreError as error:
    seen["damage"] = type(error).__name__
seen["move-aside"] = main(["sessions", "move-aside", "--db", path])
print(json.dumps(seen))
"""


@pytest.fixture
def db(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    return recorded(tmp_path / "s.db")


def cannot_be_opened(monkeypatch) -> None:
    """SQLite's answer to a file it may not open: every URI open (read-only, immutable) fails as it does then."""
    real = sqlite3.connect

    def connect(database, *args, **kwargs):
        if kwargs.get("uri"):
            raise sqlite3.OperationalError("unable to open database file")
        return real(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    monkeypatch.setattr(app.store, "writable", lambda path: False)  # root writes everywhere: as if it could not


def test_a_database_that_cannot_be_opened_is_unreadable_not_damaged(db, monkeypatch, capsys) -> None:
    cannot_be_opened(monkeypatch)
    with pytest.raises(StoreUnreadable) as info:
        SessionStore(db)
    said = info.value.user_message()
    assert not isinstance(info.value, StoreDamaged)
    assert f"cannot read the session database {db}" in said and "permissions" in said and "move-aside" not in said
    with pytest.raises(StoreUnreadable, match="nothing was moved"):
        store_file.damage(db)
    assert exit_code(["sessions", "list", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "cannot read the session database" in err and "damaged" not in err
    assert exit_code(["sessions", "move-aside", "--db", str(db)]) == 2
    assert "cannot read the session database" in capsys.readouterr().err
    assert db.exists() and not list(db.parent.glob("s.db.damaged-*"))


def test_a_database_opened_but_malformed_is_still_damaged(db, monkeypatch) -> None:
    """Only a file SQLite could not open is unreadable: a malformed one stays damage, to be moved aside."""
    def malformed(conn: sqlite3.Connection) -> str:
        raise sqlite3.OperationalError("database disk image is malformed")

    monkeypatch.setattr(store_file, "quick_check", malformed)
    assert store_file.damage(db) == "database disk image is malformed"


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_a_database_the_user_may_not_read_is_not_moved_aside() -> None:
    """As the reviewer met it: a chmod-000 copy read by another user (root reads every file, so a root run reads it
    as uid nobody) was called damaged, and move-aside exited 0 having moved it."""
    folder = Path(tempfile.mkdtemp())
    try:
        folder.chmod(0o777)  # the other user could rename the file in it: only the refusal keeps it there
        db = recorded(folder / "s.db")
        db.chmod(0)
        done, seen = as_another_user(CHILD, db, folder)
        assert seen == {"open": "StoreUnreadable", "damage": "StoreUnreadable", "move-aside": 2}, done.stderr
        assert "cannot read the session database" in done.stderr and "damaged" not in done.stderr
        assert db.exists() and not list(folder.glob("s.db.damaged-*"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
