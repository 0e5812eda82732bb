"""The session database's schema as append-only migrations: `m001_initial`, `m002_...`; never edit a released one.

`SessionStore` applies the ones a database has not seen, in order, inside one transaction when
it opens the file, and records each by name in the `migrations` table.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlite_utils import Database


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


MIGRATIONS: tuple[Callable[[Database], None], ...] = (m001_initial,)
SCHEMA_VERSION = len(MIGRATIONS)
