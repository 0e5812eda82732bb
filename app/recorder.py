"""`SessionRecorder`: stores a run's events and the rows its `SessionModel` reads as, one transaction per step.

The GUI worker and `beamwise run` both feed every event to `write`. The recorder folds each
event into a `SessionModel` of its own (the fold the window uses), and when a step ends (its
`StepSelected`) or the run does, it reads that step's rows from the model
(app/session/rows.py) and writes them with the step's events together, so a run that is
cancelled, fails or is killed keeps exactly the steps that finished. If the database is busy
(`StoreLocked`), cannot be written (`StoreReadOnly`) or its disk is full (`StoreFull`) and the
recorder was given journal folders, it stops writing the database for this run and keeps the whole
run in a journal (`app.journal`) in the first folder that takes it, flushed per step, which the next
open of the database imports. When no folder takes it, the run goes on unsaved and says so once.
Recorders that share a `LockSeen` (the runs of one `beamwise eval`) do not wait for a lock one of them met just
now: a later run goes to its journal at once.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app import event_log
from app.journal import RunJournal, header_for, saved_when
from app.session import ROOT_ID, SessionModel
from app.session.rows import candidate_row, row_state, session_facts, session_settings, step_row
from app.store import SessionStore, now_iso, short_title
from app.store_errors import StoreError, StoreFull, StoreLocked, StoreReadOnly
from engine import events as ev
from engine.candidate import outside_the_search

UNAVAILABLE = (StoreLocked, StoreReadOnly, StoreFull)  # the database is there but cannot take this run's rows now
Folders = Path | Sequence[Path]  # where a journal may go, best first
LOCK_RETRY_S = 60.0  # after a write met another program's lock, the next runs go to journals this long, not waiting


class LockSeen:
    """When a write last found the session database locked by another program, shared by the recorders of one
    process's runs into one store (`beamwise eval`'s problems). For `retry_s` after it, a new run goes to its
    journal at once instead of waiting the whole busy timeout first: each run of an eval under a held lock waited
    it (5 s) before its journal, so the eval took 5 s more per problem. After `retry_s` a run tries again."""

    def __init__(self, retry_s: float = LOCK_RETRY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.retry_s, self._clock = retry_s, clock
        self.at: float | None = None

    def saw(self) -> None:
        self.at = self._clock()

    def ago(self) -> float | None:
        """Seconds since the lock was met, while under `retry_s`; None when a write should try the database."""
        ago = None if self.at is None else self._clock() - self.at
        return ago if ago is not None and ago < self.retry_s else None


@dataclass
class _Batch:
    """What one step (or the run's end) adds to the database, read from the session model when it closed."""

    events: list[tuple[int, dict]] = field(default_factory=list)  # (seq, event dict)
    candidates: list[dict] = field(default_factory=list)  # candidates first seen in this batch
    steps: list[dict] = field(default_factory=list)
    states: dict[str, list[int]] = field(default_factory=dict)  # state -> earlier candidates that changed to it
    session: dict[str, Any] = field(default_factory=dict)  # the session's columns as of this batch


class SessionRecorder:
    """Records one run. `session_id` is set once `RunStarted` has been written; `model` is the run folded so far.

    `journal_folder` (a folder or folders, best first, or a callable giving them) turns a busy database into a
    journal instead of an error; `notify` receives the one line a user should read when that happens.
    `unsaved` is True once neither the database nor any journal folder could take the run.
    `clock`, `created`, `session_id` and `transaction` let `app.journal_import` replay a journal.
    `previous` (a session id) records the run as the next turn of that session's conversation (app/conversations.py).
    `lock` is shared by the recorders of one process's runs (above); with no journal folder it is not used.
    Times (the journal's, each step's seconds) leave out the time `write` itself took: a write that waited 5 s
    for the lock is not the search's time (engine/candidate.py `outside_the_search`, which the search's clock reads).
    """

    def __init__(
        self,
        store: SessionStore,
        *,
        title: str | None = None,
        journal_folder: Folders | Callable[[], Folders] | None = None,
        notify: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        created: str | None = None,
        session_id: int | None = None,
        transaction: Callable[[], AbstractContextManager] | None = None,
        previous: int | None = None,
        lock: LockSeen | None = None,
    ) -> None:
        self.store = store
        self.title = title
        self.session_id: int | None = None
        self.finished = False
        self.unsaved = False
        self.journal: RunJournal | None = None
        self.read_only_database = False  # the run went to its journal because the database can only be read
        self.model = SessionModel(layout=False)  # the recorder reads rows, never row positions
        self._journal_folder, self._notify, self._clock = journal_folder, notify or (lambda _text: None), clock
        self._created, self._forced_id, self.previous, self._lock = created, session_id, previous, lock
        self._transaction = transaction or store.transaction
        self._log: list[tuple[float, dict]] = []  # every event of the run, for a journal started mid-run
        self._open: list[tuple[int, dict]] = []  # (seq, event dict) of the step in progress
        self._pending: list[_Batch] = []  # closed steps not yet committed, oldest first
        self._stored: dict[int, str] = {}  # candidate id -> the state its row was given
        self._touched: set[int] = set()  # nodes the events since the last batch changed (the model says which)
        self._seq = 0
        self._started = clock()
        self._held = 0.0  # seconds spent inside `write` since the run started (waits for the lock among them)

    def __enter__(self) -> SessionRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, event: Any) -> None:
        """Consume one engine event; writes happen on RunStarted, each StepSelected and the terminal event."""
        if self.finished:
            raise ValueError(
                f"this recorder already recorded the end of session {self.session_id}; "
                "use a new SessionRecorder for the next run."
            )
        if event.type == "run_started":
            if self._log:
                raise ValueError("one SessionRecorder records one run; RunStarted came twice.")
            self._started = self._clock()
        elif not self._log:
            raise ValueError(f"the recorder got {event.type} before run_started; feed it the whole event stream.")
        entered = self._clock()
        try:
            with outside_the_search():  # the search's own seconds leave it out, as the run's times here do
                self._record(event)
        finally:
            self._held += self._clock() - entered

    def _elapsed(self) -> float:
        return self._clock() - self._started - self._held

    def _record(self, event: Any) -> None:
        self._log.append((self._elapsed(), ev.to_dict(event)))
        self._touched |= self.model.apply(event).nodes
        boundary = event.type == "step_selected" or event.type in ev.TERMINAL_TYPES
        if self.unsaved:
            return
        if self.journal is not None:
            self._journal_last(boundary)
        else:
            self._write_rows(event, boundary)
        if event.type in ev.TERMINAL_TYPES and (self.journal is not None or not self._pending):
            self.finished = True

    def writes_database(self, event: Any) -> bool:
        """Whether `write(event)` writes the database file, and so may wait up to its busy timeout for another
        program's lock: the run's start, each step's end and the run's end, until the run goes to a journal (at
        its start, while a run sharing its `lock` met the lock moments ago)."""
        if self.unsaved or self.finished or self.journal is not None or self.store.path is None:
            return False
        if self.session_id is None:
            return self._lock_ago() is None
        return event.type == "step_selected" or event.type in ev.TERMINAL_TYPES

    def _lock_ago(self) -> float | None:
        """Seconds since a run sharing this recorder's `lock` met the lock, while the next runs journal at once."""
        return None if self._lock is None or self._journal_folder is None else self._lock.ago()

    def _write_rows(self, event: Any, boundary: bool) -> None:
        ago = self._lock_ago() if self.session_id is None else None
        if ago is not None:  # a run met the lock moments ago: this one goes to its journal without waiting too
            self._divert(StoreLocked(f"the session database {self.store.path} was locked by another program "
                                     f"{ago:.1f} s ago, so this run does not wait for its lock again."))
            return
        try:
            if self.session_id is None:
                self._start()  # a start that found the database busy is retried here
            if event.type == "run_started":
                return
            self._open.append((self._seq, self._log[-1][1]))
            self._seq += 1
            if boundary:
                self._close_batch()
                self.flush()
        except UNAVAILABLE as error:
            if self._journal_folder is None:
                raise
            self._met(error)
            self._divert(error)

    def _met(self, error: StoreError) -> None:
        """A lock met is said to the next runs sharing `lock`; their own skips are not (the lock ages, and is tried)."""
        if isinstance(error, StoreLocked) and self._lock is not None:
            self._lock.saw()

    @property
    def journal_path(self) -> Path | None:
        return None if self.journal is None else self.journal.path

    def _divert(self, error: StoreError) -> None:
        """From now on this run goes to a journal: everything so far, then each event as it comes. The first
        folder that takes the whole log keeps it (beside the database, then the user data folder's journals/);
        when none does (a full disk), the run goes on unsaved and the user is told once."""
        problems = []
        for folder in self._folders():
            try:
                self.journal = RunJournal(folder, header_for(self.store.path, self._created or now_iso(),
                                                             self.session_id, self.previous, self.title))
                for seconds, data in self._log:
                    self.journal.append(seconds, data)
                self.journal.sync()
            except OSError as failure:
                self._drop_journal()
                problems.append(f"{folder}: {failure.strerror or failure}")
                continue
            self.read_only_database = self.read_only_database or isinstance(error, StoreReadOnly)
            self._notify(f"{error} This run is kept in the journal {self.journal.path} and "
                         f"{saved_when(self.store.path, self.read_only_database)}.")
            return
        self.unsaved = True
        self._notify(f"{error} No run journal could be written either ({'; '.join(problems)}): this run is NOT "
                     "being saved. It goes on, and its answer is shown; free disk space to save the next one.")

    def _folders(self) -> list[Path]:
        folders = self._journal_folder() if callable(self._journal_folder) else self._journal_folder
        assert folders is not None and self.store.path is not None
        return [folders] if isinstance(folders, Path) else list(folders)

    def _drop_journal(self) -> None:
        """A journal that could not take the run is deleted: the next folder's holds all of it, and two journals
        of one run would import as two sessions."""
        journal, self.journal = self.journal, None
        if journal is not None:
            journal.discard()

    def _journal_last(self, boundary: bool) -> None:
        assert self.journal is not None
        try:
            self.journal.append(*self._log[-1])
            if boundary:
                self.journal.sync()
        except OSError as failure:  # its disk filled mid-run: the whole run moves on to the next folder that takes it
            failed = self.journal.path.parent
            self._drop_journal()
            self._journal_folder = [f for f in self._folders() if f != failed]
            why = failure.strerror or failure
            self._divert(StoreError(f"the run journal in {failed} could not be written ({why})."))

    def flush(self) -> None:
        """Write every closed step (and the end of the run, if it came) in one transaction."""
        if not self._pending:
            return
        session: dict[str, Any] = {}
        store = self.store
        with self._transaction() as conn:
            for batch in self._pending:
                store.insert_rows(conn, "events", event_log.rows(self.session_id, batch.events))
                store.insert_rows(conn, "candidates", batch.candidates)
                store.insert_rows(conn, "steps", batch.steps)
                for state, ids in batch.states.items():
                    marks = ", ".join("?" * len(ids))
                    conn.execute(
                        f"UPDATE candidates SET state = ? WHERE session_id = ? AND id IN ({marks})",
                        [state, self.session_id, *ids],
                    )
                session.update(batch.session)
            sets = ", ".join(f"[{k}] = ?" for k in session)
            conn.execute(f"UPDATE sessions SET {sets} WHERE id = ?", [*session.values(), self.session_id])
        self._pending.clear()  # only once the transaction committed
        self.finished = session["status"] != "running"

    def close(self) -> None:
        """End of use: a run that never reached its terminal event is marked 'interrupted'.

        A journalled run only closes its journal: its importer marks it interrupted if it must.
        """
        if self.journal is not None:
            self.journal.close()
            return
        if self.session_id is None or self.finished or self.unsaved:
            return
        self._close_batch(interrupted=True)
        try:
            self.flush()
        except UNAVAILABLE as error:
            if self._journal_folder is None:
                raise
            self._met(error)
            self._divert(error)
            if self.journal is not None:
                self.journal.close()

    # ---------------------------------------------------------------- internals

    def _start(self) -> None:
        row = {
            "title": self.title or short_title(self.model.run.started.question),  # type: ignore[union-attr]
            "created": self._created or now_iso(),
            **session_settings(self.model),
            "status": "running",
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        row["emulated"] = int(row["emulated"])
        if self._forced_id is not None:
            row["id"] = self._forced_id
        self._created = row["created"]
        with self._transaction() as conn:
            session_id = self.store.insert_session(conn, row, previous=self.previous)
            self.store.insert_rows(conn, "events", event_log.rows(session_id, [(0, self._log[0][1])]))
        self.session_id, self._seq = session_id, 1

    def _close_batch(self, *, interrupted: bool = False) -> None:
        """Read what the open events changed from the model into a batch for the next flush."""
        model, sid = self.model, self.session_id
        batch = _Batch(events=self._open)
        for node in (model.tree.node(i) for i in sorted(self._touched - {ROOT_ID})):
            state = row_state(node, model)
            if node.id not in self._stored:
                batch.candidates.append({"session_id": sid, **candidate_row(node, model)})
            elif self._stored[node.id] != state:
                batch.states.setdefault(state, []).append(node.id)
            self._stored[node.id] = state
        now = round(self._elapsed(), 6)
        batch.steps = [
            {"session_id": sid, **_encoded(step_row(model.run.steps[data["step"]])), "seconds": now}
            for _, data in self._open
            if data["type"] == "step_selected"
        ]
        batch.session = session_facts(model)
        if "path" in batch.session:
            batch.session["path"] = json.dumps(batch.session["path"])
        batch.session.setdefault("seconds", now)
        if interrupted:
            batch.session["status"] = "interrupted"
        if batch.session["status"] != "running":
            batch.session["finished"] = now_iso()
        self._pending.append(batch)
        self._open, self._touched = [], set()


def _encoded(row: dict[str, Any]) -> dict[str, Any]:
    """A step row with its id lists as the JSON text the steps table holds."""
    return {**row, **{key: json.dumps(row[key]) for key in ("beams", "kept", "pruned")}}
