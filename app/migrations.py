"""The session database's schema as append-only migrations: `m001_initial`, `m002_...`; never edit a released one.

`SessionStore` applies the ones a database has not seen, in order, inside one transaction when
it opens the file, and records each by name in the `migrations` table.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

from sqlite_utils import Database

from app import event_log
from app.store_errors import StoreError, StoreTooNew


def m001_initial(db: Database) -> None:
    db["sessions"].create({
        "id": int, "title": str, "question": str, "created": str, "finished": str, "model": str,
        "verifier": str, "device": str, "emulated": int, "policy": str, "kv_budget_bytes": int,
        "search": str, "cache": str, "status": str, "answer": str, "score": float, "path": str,
        "error": str, "prompt_tokens": int, "steps": int, "candidates": int, "candidate_tokens": int,
        "seconds": float, "h2d_bytes": int, "d2h_bytes": int, "pid": int, "host": str,
    }, pk="id", not_null={"question", "created", "status"},
        defaults={"status": "running", "steps": 0, "candidates": 0, "candidate_tokens": 0,
                  "seconds": 0.0, "h2d_bytes": 0, "d2h_bytes": 0})
    db["candidates"].create({
        "session_id": int, "id": int, "parent": int, "step": int, "text": str, "tokens": int,
        "score": float, "aggregate": float, "state": str, "finished": int, "group": int,
        "device_bytes": int, "host_bytes": int, "h2d_bytes": int, "d2h_bytes": int,
    }, pk=("session_id", "id"), foreign_keys=[("session_id", "sessions", "id")])
    db["steps"].create({
        "session_id": int, "step": int, "beams": str, "kept": str, "pruned": str, "groups": int,
        "budget_bytes": int, "device_bytes": int, "host_bytes": int, "peak_device_bytes": int,
        "h2d_bytes": int, "d2h_bytes": int, "d2d_bytes": int, "step_h2d_bytes": int,
        "step_d2h_bytes": int, "step_d2d_bytes": int, "copy_seconds": float,
        "modelled_pcie_seconds": float, "compute_seconds": float, "stall_share": float, "seconds": float,
    }, pk=("session_id", "step"), foreign_keys=[("session_id", "sessions", "id")])
    db["events"].create({"session_id": int, "seq": int, "type": str, "data": str},
                        pk=("session_id", "seq"), foreign_keys=[("session_id", "sessions", "id")])
    db["sessions"].create_index(["created"])
    db["sessions"].create_index(["status"])
    db["candidates"].create_index(["session_id", "step"])


def m002_scored_text_once(db: Database) -> None:
    """Each step's text once: a stored candidate_scored keeps only what its candidate_text does not hold."""
    conn = db.conn
    for (session_id,) in conn.execute("SELECT id FROM sessions").fetchall():
        rows = conn.execute("SELECT seq, data FROM events WHERE session_id = ? AND type IN (?, ?) ORDER BY seq",
                            (session_id, event_log.TEXT, event_log.SCORED)).fetchall()
        stored = [json.loads(data) for _, data in rows]
        changed = [(json.dumps(new), session_id, seq)
                   for (seq, _), old, new in zip(rows, stored, event_log.compact(stored), strict=True) if new != old]
        conn.executemany("UPDATE events SET data = ? WHERE session_id = ? AND seq = ?", changed)


def m003_conversations(db: Database) -> None:
    """Sessions become turns of conversations: `conversation_id` (its first turn's session id), `turn` (1-based)
    and `previous_id` (the turn it follows; a rerun of a turn follows the same one). Each existing session
    becomes a one-turn conversation of its own."""
    sessions = db["sessions"]
    sessions.add_column("conversation_id", int)
    sessions.add_column("turn", int)
    sessions.add_column("previous_id", int)
    db.conn.execute("UPDATE sessions SET conversation_id = id, turn = 1 WHERE conversation_id IS NULL")
    sessions.create_index(["conversation_id", "turn"])


def m004_session_ids_never_reused(db: Database) -> None:
    """A deleted session's id is never given again: `sessions.id` has no AUTOINCREMENT (m001), so SQLite gave the
    next run the id of the newest session deleted, and a saved follow-up hint, an export's name or an earlier stderr
    line then named another run. `id_high_water` keeps the largest session id ever given, as SQLite's own
    sqlite_sequence does for an AUTOINCREMENT table, and `SessionStore.insert_session` gives each new session the
    next id above it (inside its write transaction, so two processes never take the same one). The table is not
    rebuilt with AUTOINCREMENT: the candidates, steps and events tables' foreign keys name it, and dropping it
    under their rows fails ("FOREIGN KEY constraint failed") inside the migrations' transaction, where foreign keys
    cannot be turned off. Ids deleted before this migration are not recorded anywhere: it starts at the largest id
    there is."""
    db["id_high_water"].create({"name": str, "largest_id": int}, pk="name", not_null={"largest_id"})
    db.conn.execute("INSERT INTO id_high_water (name, largest_id) SELECT 'sessions', coalesce(max(id), 0) "
                    "FROM sessions")


MIGRATIONS: tuple[Callable[[Database], None], ...] = (m001_initial, m002_scored_text_once, m003_conversations,
                                                      m004_session_ids_never_reused)
SCHEMA_VERSION = len(MIGRATIONS)
WRITES_ONLY = frozenset({m004_session_ids_never_reused.__name__})  # a database opened to be read only may lack these


def table_names(conn: sqlite3.Connection) -> set[str]:
    return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def applied_migrations(conn: sqlite3.Connection, tables: set[str]) -> set[str]:
    """The names of the migrations the database at `conn` (whose tables are `tables`) records as applied (none
    when it has no such table)."""
    return {name for (name,) in conn.execute("SELECT name FROM migrations")} if "migrations" in tables else set()


def unusable_schema(conn: sqlite3.Connection, path: Path | None, tables: set[str]) -> StoreError | None:
    """The refusal of a SQLite database (whose tables are `tables`) this Beamwise cannot use for its sessions: a
    schema newer than it knows (`StoreTooNew`: a higher version, or a migration it does not know, named since the
    version may be no higher), or tables of another program; None for a Beamwise database (or an empty one)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        return StoreTooNew(f"the session database {path} has schema version {version}, newer than this Beamwise "
                           f"understands ({SCHEMA_VERSION}); it was not changed.")
    unknown = sorted(applied_migrations(conn, tables) - {m.__name__ for m in MIGRATIONS})
    if unknown:
        named = ", ".join(unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
        return StoreTooNew(f"the session database {path} records schema changes this Beamwise does not know ({named}): "
                           "a newer Beamwise wrote it; it was not changed.")
    if tables and "migrations" not in tables:
        return StoreError(f"{path} is a SQLite database of another program, not Beamwise sessions; it was not "
                          "changed.", hint="Pass --db with a new file name.")
    return None
