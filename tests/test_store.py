"""SessionStore: migrations, listing and editing, and every storage fault the issue names."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app import store_file
from app.db_kind import SQLITE_HEADER
from app.db_path import default_db_path
from app.journal_import import open_session_store
from app.processes import alive_since, started_at
from app.recorder import SessionRecorder
from app.store import SCHEMA_VERSION, SessionStore, short_title
from app.store_errors import SessionNotFound, StoreDamaged, StoreError, StoreLocked, StoreTooNew
from benchmarks.fake_search import fake_run


def record(store: SessionStore, question: str = "What is 2+2?", **kwargs) -> int:
    recorder = SessionRecorder(store)
    for event in fake_run(question, **kwargs):
        recorder.write(event)
    return recorder.session_id


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


def test_new_file_gets_wal_migrations_and_schema_version(db_path: Path) -> None:
    with SessionStore(db_path) as store:
        assert store.schema_version == SCHEMA_VERSION == 4
        assert store.db.journal_mode == "wal"
        names = ["m001_initial", "m002_scored_text_once", "m003_conversations", "m004_session_ids_never_reused"]
        assert [r["name"] for r in store.db["migrations"].rows] == names
        assert {"sessions", "candidates", "steps", "events"} <= set(store.db.table_names())
    with SessionStore(db_path) as again:  # reopening applies nothing twice
        assert [r["name"] for r in again.db["migrations"].rows] == names


def test_default_path_follows_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    assert default_db_path() == tmp_path / "data" / "sessions.db"
    with SessionStore() as store:
        assert store.path == tmp_path / "data" / "sessions.db"
    assert (tmp_path / "data" / "sessions.db").is_file()


def test_list_search_rename_delete() -> None:
    with SessionStore(memory=True) as store:
        a = record(store, "How fast is the train?")
        b = record(store, "What is 100% of 7?")
        assert [s["id"] for s in store.list_sessions()] == [b, a]  # newest first
        assert [s["id"] for s in store.list_sessions("TRAIN")] == [a]
        assert [s["id"] for s in store.list_sessions("100%")] == [b]
        assert store.list_sessions("%") == [s for s in store.list_sessions() if "%" in s["question"]]
        assert [s["id"] for s in store.list_sessions("80 km/h")] == [b, a]  # the answer is searched too
        assert len(store.list_sessions(limit=1)) == 1
        store.rename(a, "  Train   speed ")
        assert store.get_session(a)["title"] == "Train speed"
        with pytest.raises(ValueError, match="some text"):
            store.rename(a, "   ")
        store.delete(a)
        with pytest.raises(SessionNotFound, match="no session"):
            store.get_session(a)
        assert store.db["candidates"].count_where("session_id = ?", [a]) == 0
        assert store.db["events"].count_where("session_id = ?", [a]) == 0
        assert len(store.candidates(b)) == 12 and len(store.events(b)) > 0
        with pytest.raises(SessionNotFound):
            store.delete(a)


def test_short_title() -> None:
    assert short_title("  a   b \nsecond line") == "a b"
    long = short_title("x" * 100, limit=20)
    assert len(long) == 20 and long.endswith("…")


def test_newer_schema_is_refused_and_left_unchanged(db_path: Path) -> None:
    SessionStore(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = db_path.read_bytes()
    with pytest.raises(StoreTooNew, match="newer than this Beamwise") as info:
        SessionStore(db_path)
    assert "Update Beamwise" in info.value.user_message()
    assert db_path.read_bytes() == before


def test_unknown_migration_is_refused(db_path: Path) -> None:
    SessionStore(db_path).close()
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("INSERT INTO migrations (name, applied) VALUES ('m099_future', 'x')")
    conn.close()
    with pytest.raises(StoreTooNew):
        SessionStore(db_path)


def test_another_programs_database_is_refused(db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    before = db_path.read_bytes()
    with pytest.raises(StoreError, match="another program"):
        SessionStore(db_path)
    assert db_path.read_bytes() == before


def test_damaged_file_is_reported_untouched_and_can_be_moved_aside(db_path: Path) -> None:
    garbage = SQLITE_HEADER + bytes(range(256)) * 64  # SQLite's header, wrecked pages after it
    db_path.write_bytes(garbage)
    with pytest.raises(StoreDamaged, match="damaged") as info:
        SessionStore(db_path)
    assert str(db_path) in info.value.user_message() and "move-aside" in info.value.user_message()
    assert db_path.read_bytes() == garbage  # never overwritten
    moved = store_file.move_aside(db_path)
    assert moved.name.startswith("sessions.db.damaged-") and moved.read_bytes() == garbage
    assert not db_path.exists()
    with SessionStore(db_path) as fresh:
        assert fresh.list_sessions() == []
    db_path.write_bytes(garbage)  # a second damage in the same second gets its own name
    assert store_file.move_aside(db_path) != moved
    with pytest.raises(StoreError, match="no file"):
        store_file.move_aside(db_path)


def test_malformed_pages_are_reported_as_damaged(db_path: Path) -> None:
    with SessionStore(db_path) as store:
        for _ in range(5):
            record(store, "x" * 2000)
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db_path.read_bytes())
    page = 4096
    data[page: len(data)] = b"\xff" * (len(data) - page)  # keep the header, wreck every other page
    db_path.write_bytes(bytes(data))
    with pytest.raises(StoreDamaged):
        store = SessionStore(db_path)
        store.list_sessions()


def test_a_file_whose_later_pages_are_damaged_takes_no_write(db_path: Path) -> None:
    """The header and schema open, so opening alone did not see it: a run was recorded over the damage (under a
    session id read from a wrecked page), rename and import wrote too. Before its first write a store reads every
    page once; the file is refused, byte for byte unchanged, and so is every writing command."""
    with SessionStore(db_path) as store:
        for _ in range(4):
            record(store, "x" * 3000)
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db_path.read_bytes())
    for page in range(8192, len(data), 4096):  # the first two pages (header, schema) intact
        data[page + 200 : page + 1200] = b"\xab" * 1000
    db_path.write_bytes(bytes(data))
    store = SessionStore(db_path)  # opens: what it read so far is whole
    for write in (lambda: record(store), lambda: store.rename(1, "x"), lambda: store.delete(1)):
        with pytest.raises(StoreDamaged, match="is damaged"):
            write()
    store.close()
    with pytest.raises(StoreDamaged, match="it was left untouched"):
        open_session_store(db_path)  # every command's way in: refused before a run starts
    assert db_path.read_bytes() == bytes(data)


def test_locked_database_waits_then_says_so_and_loses_nothing(db_path: Path) -> None:
    with SessionStore(db_path) as setup:
        sid = record(setup)
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        store = SessionStore(db_path, busy_timeout=0.2)  # opening only reads
        assert store.get_session(sid)["status"] == "finished"  # WAL: readers still read
        start = time.monotonic()
        with pytest.raises(StoreLocked, match="busy") as info:
            store.rename(sid, "new title")
        assert time.monotonic() - start >= 0.15  # it waited before giving up
        assert "nothing was changed" in info.value.user_message()  # true for a refused write; a run journals
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.rename(sid, "new title")
    assert store.get_session(sid)["title"] == "new title"
    assert len(store.candidates(sid)) == 12
    store.close()


def test_locked_fresh_database_on_open(db_path: Path) -> None:
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied TEXT)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreLocked):
            SessionStore(db_path, busy_timeout=0.05)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="busy_timeout"):
        SessionStore(memory=True, busy_timeout=-1)
    with pytest.raises(StoreError, match="folder"):
        SessionStore(tmp_path)


def test_running_sessions_of_dead_processes_become_interrupted(db_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)
    with SessionStore(db_path) as store:
        mine = store.create_session({"question": "mine", "status": "running", "pid": os.getpid()})
        gone = store.create_session({"question": "gone", "status": "running", "pid": dead_pid})
        elsewhere = store.create_session({"question": "other host", "status": "running", "pid": dead_pid,
                                          "host": "some-other-machine"})
    with SessionStore(db_path) as store:
        assert store.get_session(gone)["status"] == "interrupted"
        assert store.get_session(mine)["status"] == "running"  # this process is alive
        assert store.get_session(elsewhere)["status"] == "running"  # cannot judge another machine's pids



@pytest.mark.skipif(started_at(os.getpid()) is None, reason="this system does not say when a process started")
def test_a_running_session_whose_pid_now_names_a_later_process_is_interrupted(db_path: Path) -> None:
    """After a restart another program may have the dead writer's process id: it started after the row was
    written, so the row's writer is gone (the row stayed 'running' for ever)."""
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with SessionStore(db_path) as store:
            reused = store.create_session({"question": "reused", "status": "running", "pid": later.pid,
                                           "created": "2026-01-01T00:00:00+00:00"})
            live = store.create_session({"question": "live", "status": "running", "pid": later.pid,
                                         "created": "2099-01-01T00:00:00+00:00"})  # written after it started
        with SessionStore(db_path) as store:
            assert store.get_session(reused)["status"] == "interrupted"
            assert store.get_session(live)["status"] == "running"
    finally:
        later.kill()
        later.wait()


def test_a_process_started_after_a_time_is_not_alive_since_it():
    assert alive_since(os.getpid(), "2099-01-01T00:00:00+00:00")  # this process: always its own writer
    assert not alive_since(2**31 - 1, "2026-01-01T00:00:00+00:00")  # no such process
    assert alive_since(os.getpid(), "not a time") and started_at(2**31 - 1) is None


def test_a_run_still_being_recorded_is_not_deleted() -> None:
    """Deleting it left the run writing to a session that was gone: the rest of it was lost."""
    with SessionStore(memory=True) as store:
        live = store.create_session({"question": "mine", "status": "running", "pid": os.getpid()})
        with pytest.raises(StoreError, match="still being recorded") as refused:
            store.delete(live)
        assert "Stop the run first" in refused.value.user_message()
        store.delete(record(store, "How fast is the train?"))  # a finished run goes
        store.get_session(live)


@pytest.mark.parametrize(("stored", "typed"), [
    ("Wie viele Äpfel hat Anna?", "äpfel"), ("Wie viele äpfel?", "ÄPFEL"), ("İstanbul'da kaç kişi?", "istanbul"),
    ("ISTANBUL nüfusu", "istanbul"), ("ΣΟΦΙΑ και λόγος", "σοφια"), ("Η σοφία", "ΣΟΦΊΑ"), ("Die Straße", "STRASSE"),
    ("Un café noir", "cafe\u0301"), ("Un cafe\u0301 noir", "café"), ("ｐｒｉｃｅ １２", "price 12"),
    ("Сколько стоит МОЛОКО?", "молоко"), ("東京の人口は？", "東京"), ("שלום עולם", "עולם"), ("a 100%_b", "100%_"),
])
def test_search_finds_text_in_every_script_whatever_its_case_and_form(stored: str, typed: str) -> None:
    with SessionStore(memory=True) as store:
        found = store.create_session({"question": stored, "status": "finished"})
        store.create_session({"question": "something else entirely", "status": "finished"})
        assert [s["id"] for s in store.list_sessions(typed)] == [found]
        assert store.get_session(found)["question"] == stored  # saved and read back as written


def test_search_does_not_find_a_different_letter() -> None:
    with SessionStore(memory=True) as store:
        store.create_session({"question": "Wie viele Apfel?", "status": "finished"})
        assert store.list_sessions("äpfel") == [] and store.list_sessions("100%") == []


class _CommitFails:
    """A connection whose next COMMIT fails as SQLite's does when another process holds the lock."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def commit(self) -> None:
        raise sqlite3.OperationalError("database is locked")

    def __getattr__(self, name: str):
        return getattr(self._conn, name)


def test_a_failed_commit_is_rolled_back_and_the_next_write_works(db_path: Path) -> None:
    """The COMMIT sat outside the rollback: it left the transaction open, and every later BEGIN IMMEDIATE failed
    as a generic StoreError ("cannot start a transaction within a transaction")."""
    with SessionStore(db_path) as store:
        real = store._conn
        store._conn = _CommitFails(real)
        with pytest.raises(StoreLocked, match="busy"):
            store.create_session({"question": "lost", "status": "finished"})
        store._conn = real
        assert not real.in_transaction
        kept = store.create_session({"question": "kept", "status": "finished"})
        assert [s["id"] for s in store.list_sessions()] == [kept]


@pytest.mark.parametrize("failing", ["-shm", ""])
def test_a_failed_move_aside_moves_back_what_it_moved(db_path: Path, monkeypatch, failing: str) -> None:
    """It renamed the database, then its -wal and -shm: a failed side rename left the WAL beside the old name,
    where the next, fresh database found it."""
    store = SessionStore(db_path)
    record(store)  # an open store keeps its -wal and -shm beside the file
    names = {db_path.name, f"{db_path.name}-wal", f"{db_path.name}-shm"}
    assert {p.name for p in db_path.parent.iterdir()} == names
    rename = Path.rename

    def refuse(self: Path, target: Path) -> Path:
        if self.name == db_path.name + failing:
            raise PermissionError(13, "Permission denied")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", refuse)
    with pytest.raises(StoreError) as info:
        store_file.move_aside(db_path)
    assert info.value.args[0] == f"cannot move {db_path} aside: Permission denied; nothing was moved."
    assert {p.name for p in db_path.parent.iterdir()} == names
    monkeypatch.undo()
    moved = store_file.move_aside(db_path)
    assert {p.name for p in db_path.parent.iterdir()} == {moved.name, f"{moved.name}-wal", f"{moved.name}-shm"}
    store.close()


def test_a_move_aside_that_cannot_move_back_says_what_stays_moved(db_path: Path, monkeypatch) -> None:
    store = SessionStore(db_path)
    record(store)
    rename = Path.rename

    def refuse(self: Path, target: Path) -> Path:
        if self.name == db_path.name or ".damaged-" in self.name:  # the database, then every move back
            raise PermissionError(13, "Permission denied")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", refuse)
    with pytest.raises(StoreError) as info:
        store_file.move_aside(db_path)
    message = info.value.args[0]
    assert message.startswith(f"cannot move {db_path} aside: Permission denied; sessions.db-shm stays moved to ")
    assert "; sessions.db-wal stays moved to sessions.db.damaged-" in message
    store.close()


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="reads Linux's /proc")
def test_the_start_of_a_process_whose_name_is_no_text_is_read(tmp_path: Path) -> None:
    """/proc/PID/stat was decoded as text: a name with bytes no encoding reads raised UnicodeDecodeError, taken
    as "no start time", so a process given a dead run's pid counted as its writer and the run stayed 'running'."""
    named = os.fsencode(tmp_path) + b"/\xff\xfe-sleeper"  # the process's name is the file it ran
    os.symlink(os.fsencode(sys.executable), named)
    sleeper = subprocess.Popen([named, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 10
        while b"\xff" not in Path(f"/proc/{sleeper.pid}/stat").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)  # between fork and exec the child still bears this process's name
        started = started_at(sleeper.pid)
        assert started is not None and abs(started - time.time()) < 60
        assert not alive_since(sleeper.pid, "2020-01-01T00:00:00+00:00")  # started after that run: another one
    finally:
        sleeper.kill()
        sleeper.wait()
