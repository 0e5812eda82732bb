"""`SessionRecorder`: turns the engine's event stream into session rows, one transaction per step.

The GUI worker and `beamwise run` both feed every event to `write`. A step's events are held
until its `StepSelected` (the last event of a step) and then written together, so a run that is
cancelled, fails or is killed keeps exactly the steps that finished. If the database is busy
(`StoreLocked`) or cannot be written (`StoreReadOnly`) and the recorder was given a journal
folder, it stops writing the database for this run and keeps the whole run in a journal
(`app.journal`), flushed per step, which the next open of the database imports.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app import event_log
from app.journal import RunJournal, header_for
from app.store import SessionStore, StoreError, StoreLocked, StoreReadOnly, now_iso, short_title
from engine import events as ev

UNAVAILABLE = (StoreLocked, StoreReadOnly)  # the database is there but cannot take this run's rows now

TERMINAL_STATUS = {"run_finished": "finished", "run_cancelled": "cancelled", "run_failed": "failed"}


@dataclass
class _Rows:
    """What one flush writes: event rows, candidate rows, step rows and the session's new totals."""

    events: list[tuple[int, dict]] = field(default_factory=list)  # (seq, event dict)
    candidates: list[dict] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    session: dict[str, Any] = field(default_factory=dict)
    final_path: tuple[int, ...] = ()
    late_pruned: list[int] = field(default_factory=list)  # finished beams of earlier steps that dropped out


class SessionRecorder:
    """Records one run. `session_id` is set once `RunStarted` has been written.

    `journal_folder` (a folder, or a callable giving one) turns a busy database into a journal
    instead of an error; `notify` receives the one line a user should read when that happens.
    `clock`, `created`, `session_id` and `transaction` let `app.journal_import` replay a journal.
    """

    def __init__(self, store: SessionStore, *, title: str | None = None,
                 journal_folder: Path | Callable[[], Path] | None = None,
                 notify: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 created: str | None = None, session_id: int | None = None,
                 transaction: Callable[[], AbstractContextManager] | None = None) -> None:
        self.store = store
        self.title = title
        self.session_id: int | None = None
        self.finished = False
        self.journal: RunJournal | None = None
        self._journal_folder, self._notify, self._clock = journal_folder, notify or (lambda _text: None), clock
        self._created, self._forced_id = created, session_id
        self._transaction = transaction or store.transaction
        self._log: list[tuple[float, dict]] = []  # every event of the run, for a journal started mid-run
        self._start_event: Any = None
        self._buffer: list[tuple[int, Any]] = []  # (seq, event) not yet written
        self._seq = 0
        self._started = clock()
        self._totals = {"steps": 0, "candidates": 0, "candidate_tokens": 0}
        self._step: dict[int, dict] = {}  # candidate id -> row, for the step in progress

    def __enter__(self) -> SessionRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, event: Any) -> None:
        """Consume one engine event; writes happen on RunStarted, each StepSelected and the terminal event."""
        if self.finished:
            raise ValueError(f"this recorder already recorded the end of session {self.session_id}; "
                             "use a new SessionRecorder for the next run.")
        if event.type == "run_started":
            if self._log:
                raise ValueError("one SessionRecorder records one run; RunStarted came twice.")
            self._started = self._clock()
        elif not self._log:
            raise ValueError(f"the recorder got {event.type} before run_started; feed it the whole event stream.")
        self._log.append((self._clock() - self._started, ev.to_dict(event)))
        boundary = event.type == "step_selected" or event.type in ev.TERMINAL_TYPES
        if event.type == "run_started":
            self._start_event = event
        if self.journal is not None:
            self._journal_last(boundary)
        else:
            self._write_rows(event, boundary)
        if event.type in ev.TERMINAL_TYPES and (self.journal is not None or not self._buffer):
            self.finished = True

    def _write_rows(self, event: Any, boundary: bool) -> None:
        try:
            if self.session_id is None:
                self._start(self._start_event)  # a start that found the database busy is retried here
            if event.type == "run_started":
                return
            self._buffer.append((self._seq, event))
            self._seq += 1
            if boundary:
                self.flush()
        except UNAVAILABLE as error:
            if self._journal_folder is None:
                raise
            self._divert(error)

    @property
    def journal_path(self) -> Path | None:
        return None if self.journal is None else self.journal.path

    def _divert(self, error: StoreError) -> None:
        """From now on this run goes to a journal: everything so far, then each event as it comes."""
        folder = self._journal_folder() if callable(self._journal_folder) else self._journal_folder
        assert folder is not None and self.store.path is not None
        try:
            self.journal = RunJournal(folder, header_for(self.store.path, self._created or now_iso(), self.session_id))
            for seconds, data in self._log:
                self.journal.append(seconds, data)
            self.journal.sync()
        except OSError as failure:
            self.journal = None
            raise StoreError(f"{error} The run journal could not be written either ({failure}); "
                             "this run is NOT being saved.", hint="Free disk space or pass --db PATH.") from failure
        self._notify(f"{error} This run is kept in the journal {self.journal.path} and is saved into the "
                     "database the next time Beamwise opens it.")

    def _journal_last(self, boundary: bool) -> None:
        assert self.journal is not None
        self.journal.append(*self._log[-1])
        if boundary:
            self.journal.sync()

    def flush(self) -> None:
        """Write every buffered complete step (and the end of the run, if it came) in one transaction."""
        if not self._buffer:
            return
        cut = self._flushable()
        if cut == 0:
            return
        rows, totals = self._rows(self._buffer[:cut])
        store = self.store
        with self._transaction() as conn:
            store.insert_rows(conn, "events", event_log.rows(self.session_id, rows.events))
            store.insert_rows(conn, "candidates", rows.candidates)
            store.insert_rows(conn, "steps", rows.steps)
            sets = ", ".join(f"[{k}] = ?" for k in rows.session)
            conn.execute(f"UPDATE sessions SET {sets} WHERE id = ?", [*rows.session.values(), self.session_id])
            if rows.late_pruned:
                marks = ", ".join("?" * len(rows.late_pruned))
                conn.execute(f"UPDATE candidates SET state = 'pruned' WHERE session_id = ? AND id IN ({marks})",
                             [self.session_id, *rows.late_pruned])
            if rows.final_path:
                marks = ", ".join("?" * len(rows.final_path))
                conn.execute(f"UPDATE candidates SET state = 'final' WHERE session_id = ? AND id IN ({marks})",
                             [self.session_id, *rows.final_path])
        del self._buffer[:cut]  # only once the transaction committed
        self._totals = totals
        self.finished = rows.session.get("status", "running") != "running"

    def close(self) -> None:
        """End of use: a run that never reached its terminal event is marked 'interrupted'.

        A journalled run only closes its journal: its importer marks it interrupted if it must.
        """
        if self.journal is not None:
            self.journal.close()
            return
        if self.session_id is None or self.finished:
            return
        self._buffer.append((self._seq, None))
        self._seq += 1
        try:
            self.flush()
        except UNAVAILABLE as error:
            if self._journal_folder is None:
                raise
            self._divert(error)
            self.journal.close()  # type: ignore[union-attr]

    # ---------------------------------------------------------------- internals

    def _start(self, event: ev.RunStarted) -> None:
        row = {
            "title": self.title or short_title(event.question), "question": event.question,
            "created": self._created or now_iso(),
            "model": event.model, "verifier": event.verifier, "device": event.device, "emulated": int(event.emulated),
            "policy": event.policy, "kv_budget_bytes": event.kv_budget_bytes, "search": event.search,
            "cache": event.cache, "status": "running", "pid": os.getpid(), "host": socket.gethostname(),
        }
        if self._forced_id is not None:
            row["id"] = self._forced_id
        self._created = row["created"]
        with self._transaction() as conn:
            session_id = self.store.insert_session(conn, row)
            self.store.insert_rows(conn, "events", event_log.rows(session_id, [(0, ev.to_dict(event))]))
        self.session_id, self._seq = session_id, 1

    def _flushable(self) -> int:
        """How many buffered events end on a step or run boundary (what may be written now)."""
        cut = 0
        for i, (_, event) in enumerate(self._buffer):
            if event is None or event.type == "step_selected" or event.type in ev.TERMINAL_TYPES:
                cut = i + 1
        return cut

    def _rows(self, batch: list[tuple[int, Any]]) -> tuple[_Rows, dict[str, int]]:
        rows, totals = _Rows(), dict(self._totals)
        step: dict[str, Any] = {}
        for seq, event in batch:
            if event is None:  # close() without a terminal event
                rows.candidates += self._open_candidates("running")
                rows.session.update(status="interrupted", finished=now_iso())
                continue
            rows.events.append((seq, ev.to_dict(event)))
            self._apply(event, step, rows, totals)
        rows.session.update(totals)
        rows.session.setdefault("seconds", round(self._clock() - self._started, 6))
        return rows, totals

    def _apply(self, event: Any, step: dict[str, Any], rows: _Rows, totals: dict[str, int]) -> None:
        kind = event.type
        if kind == "prefill_done":
            rows.session["prompt_tokens"] = event.prompt_tokens
        elif kind == "step_started":
            self._step = {}
            step.clear()
            step["beams"] = event.beams
        elif kind in ("candidate_text", "candidate_scored"):
            self._step[event.id] = self._candidate_row(event, self._step.get(event.id))
        elif kind in ("memory_snapshot", "transfer_stats"):
            step[kind] = event
        elif kind == "step_selected":
            self._close_step(event, step, rows, totals)
        elif kind in TERMINAL_STATUS:
            self._end(event, rows, totals)

    def _candidate_row(self, event: Any, old: dict | None) -> dict:
        row = old or {"session_id": self.session_id, "id": event.id, "score": None, "aggregate": None,
                      "device_bytes": None, "host_bytes": None, "h2d_bytes": None, "d2h_bytes": None}
        row.update(parent=event.parent, step=event.step, text=event.text, tokens=event.tokens,
                   finished=int(event.finished), group=event.group, state="running")
        if event.type == "candidate_scored":
            row.update(score=event.score, aggregate=event.aggregate)
        return row

    def _close_step(self, event: ev.StepSelected, step: dict[str, Any], rows: _Rows, totals: dict[str, int]) -> None:
        memory, transfer = step.get("memory_snapshot"), step.get("transfer_stats")
        per_candidate = {m.id: m for m in memory.candidates} if memory else {}
        kept = set(event.kept)
        rows.late_pruned += [cid for cid in event.pruned if cid not in self._step]
        for cid, row in self._step.items():
            row["state"] = "kept" if cid in kept else "pruned"
            if cid in per_candidate:
                m = per_candidate[cid]
                row.update(device_bytes=m.device_bytes, host_bytes=m.host_bytes, h2d_bytes=m.h2d_bytes,
                           d2h_bytes=m.d2h_bytes)
        new = list(self._step.values())
        rows.candidates += new
        rows.steps.append(_step_row(self.session_id, event, step.get("beams", ()), memory, transfer,
                                    self._clock() - self._started))
        totals["steps"] = event.step
        totals["candidates"] += len(new)
        totals["candidate_tokens"] += sum(r["tokens"] for r in new)
        if transfer is not None:
            rows.session.update(h2d_bytes=transfer.h2d_bytes, d2h_bytes=transfer.d2h_bytes)
        self._step = {}

    def _open_candidates(self, state: str) -> list[dict]:
        open_rows = [{**row, "state": state} for row in self._step.values()]
        self._step = {}
        return open_rows

    def _end(self, event: Any, rows: _Rows, totals: dict[str, int]) -> None:
        rows.candidates += self._open_candidates("running")  # a step cut short by cancel or failure
        rows.session.update(status=TERMINAL_STATUS[event.type], finished=now_iso())
        if event.type == "run_finished":
            rows.session.update(answer=event.answer, score=event.score, path=json.dumps(list(event.path)),
                                seconds=event.seconds)
            totals["candidate_tokens"] = max(totals["candidate_tokens"], event.candidate_tokens)
            rows.final_path = tuple(event.path)
        elif event.type == "run_failed":
            rows.session["error"] = f"{event.error}: {event.message}"


def _step_row(session_id: int | None, event: ev.StepSelected, beams: tuple[int, ...], memory: Any, transfer: Any,
              seconds: float) -> dict:
    row: dict[str, Any] = {"session_id": session_id, "step": event.step, "beams": json.dumps(list(beams)),
                           "kept": json.dumps(list(event.kept)), "pruned": json.dumps(list(event.pruned)),
                           "seconds": round(seconds, 6)}
    for name in ("budget_bytes", "device_bytes", "host_bytes", "peak_device_bytes"):
        row[name] = getattr(memory, name) if memory else None
    for name in ("groups", "h2d_bytes", "d2h_bytes", "d2d_bytes", "step_h2d_bytes", "step_d2h_bytes",
                 "step_d2d_bytes", "copy_seconds", "modelled_pcie_seconds", "compute_seconds", "stall_share"):
        row[name] = getattr(transfer, name) if transfer else None
    return row
