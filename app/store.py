"""The session database: one `SessionStore` over sqlite-utils, with append-only migrations.

Sessions, their candidate tree, the per-step memory/PCIe timeline and every engine event
(so a session replays losslessly) live in one SQLite file in WAL mode. One store may be
shared between a worker thread and the GUI thread: every operation holds the store's lock.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from app import event_log, store_file
from app.db_kind import foreign_file
from app.db_path import DB_NAME, check_folder, db_file, db_option, is_default
from app.json_types import sqlite_int
from app.migrations import MIGRATIONS, SCHEMA_VERSION, WRITES_ONLY, applied_migrations, table_names, unusable_schema
from app.processes import alive_since
from app.session_sql import JSON_COLUMNS, decode_session, instant, newest_first, search_params, text_match
from app.shell_words import quoted
from app.store_errors import (
    NotADatabase,
    RowsRefused,
    SessionNotFound,
    StoreDamaged,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreReadOnly,
)
from app.store_file import DEFAULT_BUSY_TIMEOUT, connect_read_only, unreadable, writable
from app.text_search import FoldedTexts
from engine import events as ev
from engine.blank_text import is_blank
from engine.text_cut import cut

LARGEST_ID = 2**63 - 1  # SQLite's largest INTEGER: no row can have a larger id
BLANK_TITLE = "a session title must contain some text."  # `sessions rename` and the Sessions tab refuse with it


def now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def short_title(question: str, limit: int = 60) -> str:
    """The first line of the question, whitespace collapsed, cut at `limit` characters."""
    line = " ".join(question.strip().split("\n", 1)[0].split())
    return line if len(line) <= limit else cut(line, limit - 1).rstrip() + "…"  # never in half a letter or emoji


# ---------------------------------------------------------------- the store


class SessionStore:
    """Sessions in SQLite. `path=None` opens `default_db_path()`; `memory=True` a private in-memory db.

    Opening never writes to a file it cannot read as a Beamwise database: a damaged file raises
    `StoreDamaged` (and closing then leaves it and its WAL as they were), a newer schema `StoreTooNew`, a busy one
    `StoreLocked` after `busy_timeout` seconds, and a name the file system cannot hold `StoreError` (`db_file`).
    Sessions left 'running' by a process that no longer exists are marked 'interrupted'.
    `pages_checked`: another open store of this file has read its pages (`check_pages`), so this one's first write
    does not read them all again (a second connection of the window's, opened on the GUI thread).
    `read_only`: open the file to read it only, as a file that cannot be written is opened: nothing is written to
    it, no schema upgrade (one it needs is refused), no WAL switch, no sessions marked interrupted (`beamwise run
    --session ID --no-save --db PATH` reads the conversation from a database it must not change).
    `disk_full`: the disk under the file was too full to open it for writing (SQLite could not make the WAL's index,
    its -shm file), so it was opened to be read as it stood, and every write raises `StoreFull`: a run's recorder then
    keeps the run in a journal, and the commands that only read work as on any other disk. Once the disk has room
    again, its next operation opens the file as any other (`_room_again`).
    """

    def __init__(self, path: Path | str | None = None, *, memory: bool = False,
                 busy_timeout: float | None = None, pages_checked: bool = False, read_only: bool = False) -> None:
        busy_timeout = DEFAULT_BUSY_TIMEOUT if busy_timeout is None else busy_timeout
        if busy_timeout < 0:
            raise ValueError(f"busy_timeout must be 0 or more seconds (got {busy_timeout}).")
        self.path: Path | None = None if memory else db_file(path)
        self.busy_timeout = busy_timeout
        self._reading_only = read_only and self.path is not None  # asked for; else the file's permissions decide
        self.read_only = self._reading_only or (self.path is not None and self.path.is_file() and
                                                not writable(self.path))
        self._lock = threading.RLock()
        self._pages_checked = self.path is None or pages_checked  # a private in-memory one cannot be damaged on disk
        self._damage_seen = False  # `_damaged` said so: closing must not checkpoint the WAL into the file
        self._side_files_made: list[Path] = []  # read only: the -wal and -shm its connection makes, removed at close
        self.disk_full = False
        self._reopening = False
        made = [] if self.path is None else store_file.absent_side_files(self.path)
        try:
            self._open()
        except StoreFull:
            if self.read_only or self.path is None:
                raise
            store_file.remove_side_files(self.path, made)  # the -shm it could not grow, the empty -wal
            self.disk_full = True
            self._open()

    def _open(self) -> None:
        """Connect (to read only, if `read_only` or `disk_full`), upgrade the schema, mark dead runs interrupted."""
        self._conn = self._connect()
        self._conn.create_function("holds", 2, FoldedTexts().holds, deterministic=True)
        self._conn.create_function("instant", 1, instant, deterministic=True)  # `newest_first` orders by it
        try:
            with self._guard():
                self.db = Database(self._conn, execute_plugins=False)
                self._check_and_migrate()
                self.mark_interrupted()
        except BaseException:
            self.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        if self.path is None:
            return sqlite3.connect(":memory:", check_same_thread=False)
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a folder; pass a session database file such as {self.path / DB_NAME}.")
        if (looks := foreign_file(self.path)) is not None:
            if is_default(self.path):  # Beamwise's own file: whatever it holds, it is a damaged database
                raise self._damaged(f"it holds {looks}, not SQLite data")
            raise NotADatabase(f"{self.path} is not a session database: it holds {looks}, not SQLite data.")
        if self.read_only or self.disk_full:
            self._side_files_made = store_file.absent_side_files(self.path)
            try:
                return connect_read_only(self.path, self.busy_timeout)
            except sqlite3.OperationalError as error:  # "unable to open database file": not damage
                raise unreadable(self.path, error, "it was left untouched") from error
            except sqlite3.DatabaseError as error:  # "file is not a database": it rose as an internal error
                raise self._damaged(error) from error
        check_folder(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)  # only the default database's folder is missing here
            if not self.path.exists() and not os.access(self.path.parent, os.W_OK):
                raise StoreReadOnly(f"cannot create the session database {self.path}: the folder "
                                    f"{self.path.parent} is read-only.")
            return sqlite3.connect(str(self.path), timeout=self.busy_timeout, check_same_thread=False)
        except (OSError, sqlite3.Error) as error:
            raise StoreError(f"cannot open the session database {self.path}: {error}.",
                             hint="Check that the folder exists and is writable, or pass --db PATH.") from error

    def _room_again(self) -> None:
        """Inside the store lock: a store opened on a full disk (`disk_full`) read the file as it stood then (SQLite's
        immutable mode, which needs no -shm), and so saw none of the sessions written once the disk had room again
        (the window's own next run among them). Once its disk has room, it opens the file as any other; when that
        still fails, it reads it as it stands again, and tries at its next operation."""
        if not self.disk_full or self._reopening or not store_file.has_room(self.path):
            return
        self._reopening = True
        try:
            store_file.close_read_only(self._conn, self.path, self._side_files_made)
            self.disk_full = False
            try:
                self._open()
            except StoreError:  # still full, or another program's lock: read as it stands
                self.disk_full = True
                self._open()
        finally:
            self._reopening = False

    def close(self) -> None:
        """Close the connection. After damage was found, without copying the WAL into the damaged file (SQLite's
        last connection to close does, and deletes the WAL): the file stays as it was, its WAL beside it."""
        with self._lock:
            if self._damage_seen and not self.read_only and self.path is not None:
                store_file.close_keeping_wal(self._conn, self.path)
            elif (self.read_only or self.disk_full) and self.path is not None:
                store_file.close_read_only(self._conn, self.path, self._side_files_made)
            else:
                self._conn.close()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SessionStore({str(self.path) if self.path else ':memory:'!r})"

    # -------------------------------------------------------- errors and transactions

    @contextmanager
    def _guard(self) -> Iterator[sqlite3.Connection]:
        """Hold the store lock; turn SQLite's busy/damaged errors into clear store errors."""
        with self._lock:
            self._room_again()
            try:
                yield self._conn
            except sqlite3.OperationalError as error:
                text = str(error).lower()
                if "locked" in text or "busy" in text:
                    raise StoreLocked(
                        f"the session database {self.path} is busy: another program or Beamwise process held its lock "
                        f"for more than {self.busy_timeout:g} s.") from error
                if "malformed" in text or "could not decode" in text:  # wrecked pages, or text wrecked in a row
                    raise self._damaged(error) from error
                if "readonly" in text or "read-only" in text:
                    raise self._read_only() from error
                if self.path is not None and store_file.full_disk(self.path, error):  # SQLITE_FULL, or no room for -shm
                    raise self._full() from error
                raise StoreError(f"cannot use the session database {self.path}: {error}.",
                                 hint="Check free disk space and that the file is writable.") from error
            except sqlite3.IntegrityError as error:  # rows that break a constraint: the data, not the file
                raise RowsRefused(f"the session database {self.path} refused the rows ({error}); nothing was "
                                  "written.") from error
            except sqlite3.DatabaseError as error:
                raise self._damaged(error) from error

    @property
    def pages_checked(self) -> bool:
        """This store's pages were read whole (`check_pages`), or need not be: a store opened beside it may say so."""
        return self._pages_checked

    def check_pages(self) -> None:
        """Before this store's first write, read every page once (SQLite's quick_check, about 0.15 s for 100 MB):
        a file whose header opens but whose later pages are damaged took writes, which it laid over the damage
        (a session saved under a wrong id, rows no command could read back). Such a file is refused, untouched."""
        if self._pages_checked:
            return
        with self._guard() as conn:
            found = store_file.quick_check(conn)
        if found is not None:
            raise self._damaged(found)
        self._pages_checked = True

    def _damaged(self, error: Exception | str) -> StoreDamaged:
        self._damage_seen = True  # `close` then leaves the file and its WAL as they are
        what = str(error) if len(str(error)) <= 160 else f"{str(error)[:160]}..."  # a wrecked row's text can be long
        return StoreDamaged(
            f"the session database {self.path} is damaged ({what}); it was left untouched.",
            hint=f"Move it aside to start a fresh one (`beamwise sessions move-aside --db {quoted(str(self.path))}`); "
                 "the old file is kept next to it for recovery.")

    def _full(self) -> StoreFull:
        return StoreFull(f"the disk holding the session database {self.path} is full.")

    def _read_only(self) -> StoreReadOnly:
        """A write refused: what is read-only named as the run's journal warning names it (`read_only_refusal`)."""
        if self.path is None:
            return StoreReadOnly("the session database in memory can only be read; nothing was written.")
        return store_file.read_only_refusal(self.path)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write: everything inside lands, or nothing does. A COMMIT that fails (busy, disk full, I/O
        error) is rolled back too: SQLite leaves the transaction open then, and every later BEGIN would fail."""
        if self.read_only:
            raise self._read_only()
        with self._lock:
            self._room_again()
            if self.disk_full:
                raise self._full()
        self.check_pages()
        with self._guard() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.commit()
            except BaseException:
                conn.rollback()
                raise

    # -------------------------------------------------------- opening

    def _check_and_migrate(self) -> None:
        conn = self._conn
        tables = table_names(conn)
        if (refused := unusable_schema(conn, self.path, tables)) is not None:
            raise refused
        applied = applied_migrations(conn, tables)
        pending = [m for m in MIGRATIONS if m.__name__ not in applied]
        if self.read_only or self.disk_full:  # what only writes need (WRITES_ONLY) may stay pending: none is written
            pending = [m for m in pending if m.__name__ not in WRITES_ONLY]
            if pending and self.disk_full:
                raise StoreFull(f"the session database {self.path} needs a schema upgrade, and the disk holding it "
                                "is full; it was not changed.", hint="Free some disk space, then try again.")
            if pending and self._reading_only:
                raise StoreReadOnly(f"the session database {self.path} needs a schema upgrade before it can be read, "
                                    "and it was opened to be read only; it was not changed.",
                                    hint=f"Open it once to upgrade it (`beamwise sessions list"
                                         f"{db_option(self.path)}`), then try again.")
            if pending:  # a file that cannot be written (read_only, not _reading_only) has a path
                raise store_file.read_only_refusal(self.path, "needs a schema upgrade, but", "it was not changed")
            return
        if self.path is not None and self.db.journal_mode != "wal":
            self.db.enable_wal()
        conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a killed process loses no commit
        conn.execute("PRAGMA foreign_keys=ON")
        if not pending:
            return
        with self.transaction():  # another process may have migrated while we waited for the lock
            if "migrations" not in self.db.table_names():
                self.db["migrations"].create({"name": str, "applied": str}, pk="name")
            applied = {row[0] for row in conn.execute("SELECT name FROM migrations")}
            for migration in (m for m in MIGRATIONS if m.__name__ not in applied):
                migration(self.db)
                conn.execute("INSERT INTO migrations (name, applied) VALUES (?, ?)", (migration.__name__, now_iso()))
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @property
    def schema_version(self) -> int:
        with self._guard() as conn:
            return conn.execute("PRAGMA user_version").fetchone()[0]

    def mark_interrupted(self) -> list[int]:
        """Sessions still 'running' on this host whose process is gone become 'interrupted'."""
        if self.read_only or self.disk_full:
            return []
        with self._guard() as conn:
            rows = conn.execute("SELECT id, pid, host, created FROM sessions WHERE status = 'running'").fetchall()
            dead = [sid for sid, pid, host, created in rows if _here(host) and not _alive_here(pid, host, created)]
            if dead:
                with self.transaction():
                    conn.executemany("UPDATE sessions SET status = 'interrupted' WHERE id = ? AND status = 'running'",
                                     [(sid,) for sid in dead])
            return dead

    # -------------------------------------------------------- reading

    def list_sessions(self, search: str | None = None, limit: int | None = 200) -> list[dict]:
        """Newest first (the moment each was created, whatever its offset: `newest_first`); `search` matches title,
        question or answer (a substring, whatever its case or form)."""
        where, params = "", []
        if search and search.strip():
            where, params = "WHERE " + text_match(""), search_params(search)
        sql = f"SELECT * FROM sessions {where} ORDER BY {newest_first()} LIMIT ?"
        with self._guard() as conn:
            rows = self._dicts(conn.execute(sql, [*params, -1 if limit is None else limit]))
        return [decode_session(row) for row in rows]

    def get_session(self, session_id: int) -> dict:
        """The session row; SessionNotFound for an id no row has, also one past SQLite's integers (which SQLite
        itself answered with OverflowError). Its hint names this database's --db when it is not the default."""
        rows = []
        if sqlite_int(session_id):
            with self._guard() as conn:
                rows = self._dicts(conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)))
        if not rows:
            error = SessionNotFound(f"there is no session {session_id} in {self.path or 'this database'}.")
            if db_option(self.path):
                error.hint = f"Run `beamwise sessions list{db_option(self.path)}` to see the ids."
            raise error
        return decode_session(rows[0])

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict]:
        """Rows of one read-only SQL statement as dicts (sessions' JSON columns left as text)."""
        with self._guard() as conn:
            return self._dicts(conn.execute(sql, list(params)))

    def candidates(self, session_id: int) -> list[dict]:
        """The tree, one row per candidate, by step then id."""
        return self._rows("SELECT * FROM candidates WHERE session_id = ? ORDER BY step, id", session_id)

    def timeline(self, session_id: int) -> list[dict]:
        """Per-step memory and transfer stats, by step; beams/kept/pruned are lists."""
        rows = self._rows("SELECT * FROM steps WHERE session_id = ? ORDER BY step", session_id)
        for row in rows:
            for key in ("beams", "kept", "pruned"):
                row[key] = json.loads(row[key]) if row[key] is not None else []
        return rows

    def event_dicts(self, session_id: int) -> list[dict]:
        """The run's events as JSON data, in order. Each row holds one JSON object, so the rows
        joined by commas are one JSON array: a single decode instead of one per event."""
        with self._guard() as conn:
            cursor = conn.execute("SELECT data FROM events WHERE session_id = ? ORDER BY seq", (session_id,))
            rows = [data for (data,) in cursor]
        return event_log.expand(json.loads("[" + ",".join(rows) + "]"))

    def events(self, session_id: int) -> list[Any]:
        """The run's engine events, in order, as event objects (lossless replay)."""
        return [ev.from_dict(data) for data in self.event_dicts(session_id)]

    def _rows(self, sql: str, session_id: int) -> list[dict]:
        self.get_session(session_id)
        with self._guard() as conn:
            return self._dicts(conn.execute(sql, (session_id,)))

    @staticmethod
    def _dicts(cursor: sqlite3.Cursor) -> list[dict]:
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor]

    # -------------------------------------------------------- writing

    def create_session(self, row: dict[str, Any]) -> int:
        """Insert a session row (search/cache/path given as plain data); returns its id."""
        with self.transaction() as conn:
            return self.insert_session(conn, row)

    def insert_session(self, conn: sqlite3.Connection, row: dict[str, Any], previous: int | None = None) -> int:
        """Inside `transaction()`: insert one session row, filling title and created; returns its id, one no session
        had before, also a deleted one (m004: `id_high_water`), so an id said once never names another run.

        `previous` makes it the next turn of that session's conversation; without it the session
        starts a conversation of its own (turn 1).
        """
        data = {**row}
        for key in (*JSON_COLUMNS, "path"):
            if key in data and not isinstance(data[key], str | type(None)):
                data[key] = json.dumps(data[key])
        data["title"] = data.get("title") or short_title(data.get("question", ""))
        data.setdefault("created", now_iso())
        if previous is not None:
            found = conn.execute("SELECT conversation_id, turn FROM sessions WHERE id = ?", (previous,)).fetchone()
            if found is None:
                raise SessionNotFound(f"there is no session {previous} in {self.path or 'this database'} to follow.")
            data.update(conversation_id=found[0], turn=found[1] + 1, previous_id=previous)
        if data.get("id") is None:  # a journal's replay keeps the id its partial row was given
            data["id"] = _next_session_id(conn)
        session_id = self.insert_rows(conn, "sessions", [data])
        conn.execute("INSERT INTO id_high_water (name, largest_id) VALUES ('sessions', ?) ON CONFLICT (name) DO "
                     "UPDATE SET largest_id = max(largest_id, excluded.largest_id)", (session_id,))
        if previous is None:
            conn.execute("UPDATE sessions SET conversation_id = id, turn = 1, previous_id = NULL WHERE id = ?",
                         (session_id,))
        return session_id

    @staticmethod
    def insert_rows(conn: sqlite3.Connection, table: str, rows: list[dict[str, Any]]) -> int:
        """Inside `transaction()`: insert rows sharing the first row's keys; returns the new row's id when `rows`
        holds one row, else 0 (executemany reports no id)."""
        if not rows:
            return 0
        keys = list(rows[0])
        sql = f"INSERT INTO {table} ({', '.join(f'[{k}]' for k in keys)}) VALUES ({', '.join('?' * len(keys))})"
        if len(rows) == 1:
            return int(conn.execute(sql, [rows[0][k] for k in keys]).lastrowid)
        conn.executemany(sql, ([row[k] for k in keys] for row in rows))
        return 0

    def rename(self, session_id: int, title: str) -> None:
        title = " ".join(title.split())
        if is_blank(title):  # none, or zero-width characters alone
            raise ValueError(BLANK_TITLE)
        self.get_session(session_id)
        with self.transaction() as conn:
            conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, session_id))

    def delete(self, session_id: int) -> None:
        """Remove a session and everything recorded for it, in one transaction, when `deletable` allows it."""
        self.deletable(session_id)
        with self.transaction() as conn:
            _refuse_later_turns(conn, session_id)  # again under the write lock: a follow-up may have landed since
            for table in ("events", "steps", "candidates"):
                conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    def deletable(self, session_id: int) -> dict:
        """The session row when `delete` may remove it, else the StoreError `delete` raises; asked before a
        confirmation too, so no one answers y only to be refused. A turn that later turns follow is refused: their
        prompts held it, and a rerun or follow-up of them would silently lose it. So is a run still being recorded
        by a live process on this machine: its next step would find no session to write to, and the rest of the
        run would be lost while it went on."""
        row = self.get_session(session_id)
        if _recording(row):
            raise StoreError(f"session {session_id} is still being recorded by its run (process {row['pid']}); "
                             "nothing was deleted.",
                             hint="Stop the run first (Stop or Esc in the window, Ctrl+C for `beamwise run`), then "
                                  "delete it.")
        with self._guard() as conn:
            _refuse_later_turns(conn, session_id)
        return row


def _next_session_id(conn: sqlite3.Connection) -> int:
    """Inside a write transaction: the id after every session id ever given (`id_high_water`, m004) and every one
    there is (SQLite's own choice, the largest there is plus one, gave a deleted newest session's id again)."""
    return conn.execute("SELECT max(coalesce((SELECT largest_id FROM id_high_water WHERE name = 'sessions'), 0), "
                        "coalesce((SELECT max(id) FROM sessions), 0)) + 1").fetchone()[0]


def _refuse_later_turns(conn: sqlite3.Connection, session_id: int) -> None:
    later = [row[0] for row in conn.execute("SELECT id FROM sessions WHERE previous_id = ? ORDER BY id",
                                            (session_id,))]
    if later:
        raise StoreError(f"session {session_id} is a turn that session(s) {', '.join(map(str, later))} "
                         "follow in their conversation; nothing was deleted.",
                         hint="Delete the later turns first (newest first).")


def _recording(row: dict) -> bool:
    """Whether a session row is a run a live process on this machine is still writing."""
    return row.get("status") == "running" and _alive_here(row.get("pid"), row.get("host"), row.get("created"))


def _here(host: str | None) -> bool:
    """Whether a run recorded on `host` ran on this machine (rows from before hosts were recorded: None)."""
    return host in (None, socket.gethostname())


def _alive_here(pid: int | None, host: str | None, created: str | None) -> bool:
    """Whether the process that recorded a run is still alive on this machine (the same pid, not a newer one)."""
    return _here(host) and pid is not None and alive_since(pid, created or "")
