"""The engine's thread: a worker that loads models and drives `search.run`, re-emitting its events as signals.

Pattern (superqt's thread worker): the engine is a plain generator; each `yield` is both a progress
event and a cancellation point. The worker lives in its own QThread and never touches a widget;
it only emits signals, which Qt queues to the GUI thread. Requests go the other way as
`*_requested` signals; the stop request is a `threading.Event` the engine polls through
`should_stop`, so Stop takes effect at the next decode step without waiting for the event loop.
Exceptions never kill the thread: they become `failed` / `load_failed` with a message for the user.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QElapsedTimer, QObject, QThread, QTimer, Signal, Slot

from app.formatting import sentence
from app.gui.engine_import import engine_modules, engine_ready
from app.gui.gc_freeze import collect_all
from app.heartbeat import database_wait_line
from engine import events as ev
from engine.abandon import abandonable
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.errors import BeamwiseError, failure

ProgressFn = Callable[[str, float | None], None]
LoaderFn = Callable[[ModelSpec, str, ProgressFn], Any]  # (spec, device, progress) -> LoadedModel
RunFn = Callable[..., Iterator[Any]]  # run(question, loaded, search, cache, *, should_stop) -> events
RemoteRunFn = Callable[..., Iterator[Any]]  # run(question, server, search, *, should_stop) -> events
StoreFactory = Callable[[], Any]  # opens a SessionStore; called in the worker thread (SQLite is per thread)
ReleaseFn = Callable[[], Any]  # gives cached memory back; returns engine.idle.Released
IDLE_RELEASE_MS = 60_000  # idle this long after a run, the engine hands back the memory torch keeps cached
LOAD_SLICE_S = 0.05  # how often a load in progress passes on its progress and looks whether the window closes
DATABASE_WAIT_SAID_MS = 500  # a session database write still waiting after this long is said, then each such time


class LoadAbandoned(Exception):
    """The window closed while a model loaded: the worker stops waiting for the load, which ends on its own."""


def default_loader(spec: ModelSpec, device: str, progress: ProgressFn) -> Any:
    """engine.models.load_model ("auto" is CUDA when there is one), once PyTorch is in (the window starts without
    it: app/gui/engine_import.py); a broken install fails the load with what to reinstall."""
    if not engine_ready():
        progress("Loading PyTorch and transformers", None)
    engine_modules()
    from engine.models import load_model

    return load_model(spec, device=device, progress=progress)


def default_run(question: str, loaded: Any, search: SearchConfig, cache: CacheConfig,
                *, should_stop: Callable[[], bool], history: Sequence[tuple[str, str]] = ()) -> Iterator[Any]:
    from app.preflight import check_memory
    from engine.search import run

    check_memory(loaded, question, search, cache, history=history)  # refused before anything is allocated
    return run(question, loaded, search, cache, should_stop=should_stop, history=history)


def forget_prefix_ram() -> None:
    """Drop the prefix cache's RAM tiers (engine/kv/prefix_cache.py), the disk tiers kept. Each model the window
    ran kept its tier, up to a quarter of the free RAM, for the window's life, though only the loaded model reads
    it; switched back, a model finds its blocks on disk as a new process would."""
    from engine.kv.prefix_cache import forget_shared  # torch loads here, in the worker, not at window start

    forget_shared()


def default_release() -> Any:
    """engine.idle.release_cached_memory: the device memory and pinned RAM torch keeps after a search."""
    from engine.idle import release_cached_memory

    return release_cached_memory()


def default_remote_run(question: str, server: Any, search: SearchConfig, *, should_stop: Callable[[], bool],
                       history: Sequence[tuple[str, str]] = ()) -> Iterator[Any]:
    """engine.remote_search.run: a Stop also ends the request the server is working on. It imports the engine
    (torch among it) the one way every worker does: app/gui/engine_import.py."""
    engine_modules()
    from engine.remote_search import run

    return run(question, server, search, should_stop=should_stop, history=history)


@dataclass(frozen=True)
class Conversation:
    """Where a run goes in a conversation: the session (turn) it follows and the turns its prompt holds."""

    previous: int | None = None
    history: tuple[tuple[str, str], ...] = ()

    def extra(self) -> dict[str, Any]:
        """The run function's extra arguments: none for a first turn (injected test runs take none)."""
        return {"history": self.history} if self.history else {}


def describe_error(error: BaseException) -> str:
    """A user-facing sentence: BeamwiseErrors carry their own advice; others get their type named."""
    if isinstance(error, BeamwiseError):
        return error.user_message()
    text = str(error) or "no details"
    return f"{type(error).__name__}: {text}"


def database_wait_text(waited_s: float, limit_s: float) -> str:
    """What the window says while a write waits for the session database's lock: the CLI's heartbeat line."""
    return sentence(database_wait_line(waited_s, limit_s))


def is_database_wait(message: str) -> bool:
    """`message`, a `load_progress` stage, is the bridge's wait for the session database's lock (`database_wait_text`),
    not a stage of a model load: the only stage a server run, which loads no model, is ever said."""
    return message.startswith(database_wait_text(0.0, 0.0).partition(",")[0] + ",")


def describe_device(loaded: Any) -> str:
    """'cuda:0' as is; anything else is the emulated GPU (a budgeted CPU pool)."""
    device = str(getattr(loaded, "device", "cpu"))
    return device if device.startswith("cuda") else f"{device} (emulated GPU)"


class SearchWorker(QObject):
    """Lives in the engine thread. Caches the loaded model between runs; records events when a store is given."""

    load_progress = Signal(str, float)  # message, fraction 0..1
    model_loaded = Signal(str, str)  # model name, device description
    load_failed = Signal(str)
    event_emitted = Signal(object)  # one engine event (frozen dataclass)
    session_recorded = Signal(int)  # the id the store gave this run's session
    recording_failed = Signal(str)  # the run goes on; it is just not saved
    failed = Signal(object)  # the run raised (a fault in Beamwise): its RunFailed, with the traceback
    run_finished = Signal()  # always the last signal of every run request, whatever happened
    memory_released = Signal(object, object)  # device bytes, pinned host bytes given back (ints: they pass 2 GB)
    database_write_began = Signal(float)  # the session database is written now; it may wait this many s for its lock
    database_write_ended = Signal()

    def __init__(self, stop_flag: threading.Event, *, loader: LoaderFn | None = None, run: RunFn | None = None,
                 store_factory: StoreFactory | None = None, remote_run: RemoteRunFn | None = None,
                 release: ReleaseFn | None = None, closing: threading.Event | None = None) -> None:
        """`closing` set (the window is closing) abandons a load in progress, so closing never waits for one."""
        super().__init__()
        self._stop = stop_flag
        self._closing = closing or threading.Event()
        self._loader = loader or default_loader
        self._release = release or default_release
        self._run = run or default_run
        self._remote_run = remote_run or default_remote_run
        self._store_factory = store_factory
        self._store: Any = None
        self._loaded: Any = None
        self._loaded_key: tuple[ModelSpec, str] | None = None

    @Slot(object, str)
    def load(self, spec: ModelSpec, device: str = "auto") -> None:
        """Load `spec` unless it is already the cached model (a slot: it returns nothing to Qt)."""
        self._ensure_loaded(spec, device)

    def _ensure_loaded(self, spec: ModelSpec, device: str) -> bool:
        """True when `spec` is loaded on `device`, loading it now if needed."""
        if self._loaded is not None and self._loaded_key == (spec, device):
            self.model_loaded.emit(self._model_name(spec), describe_device(self._loaded))
            return True
        if self._loaded is not None:
            forget_prefix_ram()  # the replaced model's cached prefix blocks: only it could use them
        self._loaded, self._loaded_key = None, None  # free the old model before building a new one
        collect_all()  # its tensors too where a reference cycle holds them (a model's weights are GBs)
        try:
            loaded = self._load(spec, device)
        except LoadAbandoned:
            return False
        except Exception as error:
            self.load_failed.emit(describe_error(error))
            return False
        self._loaded, self._loaded_key = loaded, (spec, device)
        self.model_loaded.emit(self._model_name(spec), describe_device(loaded))
        return True

    @Slot()
    def release_memory(self) -> None:
        """Hand back what torch keeps cached since the last search (the model stays loaded); says how much."""
        if self._loaded is None:
            return
        try:
            released = self._release()
        except Exception as error:  # never worth a dialog: the memory just stays cached
            self.recording_failed.emit(f"Could not give cached memory back: {describe_error(error)}")
            return
        if released.any:
            self.memory_released.emit(released.device_bytes, released.host_bytes)

    @Slot(str, object, object, object, object)
    def run_search(self, question: str, spec: ModelSpec, search: SearchConfig, cache: CacheConfig,
                   conversation: Conversation | None = None) -> None:
        """Load if needed, then drive one search to its end; `run_finished` always follows."""
        talk = conversation or Conversation()
        try:
            if self._ensure_loaded(spec, cache.device) and not self._stop.is_set():
                self._drive(lambda stop: self._run(question, self._loaded, search, cache, should_stop=stop,
                                                   **talk.extra()), talk.previous)
        finally:
            self.run_finished.emit()

    @Slot(str, object, object, object)
    def run_remote(self, question: str, server: Any, search: SearchConfig,
                   conversation: Conversation | None = None) -> None:
        """One search on a generator server (nothing to load here); `run_finished` always follows."""
        talk = conversation or Conversation()
        try:
            if not self._stop.is_set():
                self._drive(lambda stop: self._remote_run(question, server, search, should_stop=stop,
                                                          **talk.extra()), talk.previous)
        finally:
            self.run_finished.emit()

    def _drive(self, events: Callable[[Callable[[], bool]], Iterator[Any]], previous: int | None = None) -> None:
        """Emit and record every event of `events(should_stop)` (the next turn after session `previous`)."""
        recorder = self._open_recorder(previous)
        started = False
        try:
            for event in events(self._stop.is_set):
                started = started or isinstance(event, ev.RunStarted)
                if started:  # an end before the start (a Stop or failure while a server is checked) has no run to
                    recorder = self._record(recorder, event)  # record: the recorder refused it, said as a fault
                self.event_emitted.emit(event)
        except Exception as error:  # the engine yields RunFailed for its own; this is a fault around it
            failed = failure(error)
            if started:  # keep the stored session well formed: it ends with a terminal event
                self._record(recorder, failed)
            self.failed.emit(failed)
        finally:
            self._close(recorder)

    def _load(self, spec: ModelSpec, device: str) -> Any:
        """The loader on a thread of its own, waited here in slices: a load (minutes for a large model, with no
        stop point inside) never holds up closing the window. That thread only queues its progress; this one
        emits it (a signal emitted from a plain Python thread makes Qt adopt it: app/gui/background.py)."""
        reports: queue.SimpleQueue = queue.SimpleQueue()

        def pass_on() -> None:
            while not reports.empty():
                self._report_progress(*reports.get_nowait())
            if self._closing.is_set():
                raise LoadAbandoned

        loader = self._loader  # the load thread holds no reference to this QObject: abandoned, it may end last, and
        # a QObject whose last reference goes on a plain Python thread is deleted there (a segfault beside the GUI's)
        loaded = abandonable(lambda: loader(spec, device, lambda *report: reports.put(report)),
                             "beamwise-load", pass_on, LOAD_SLICE_S)
        pass_on()
        return loaded

    def _report_progress(self, message: str, fraction: float | None) -> None:
        """fraction None (a stage of unknown length) is sent as -1: the GUI shows a busy bar."""
        self.load_progress.emit(str(message), -1.0 if fraction is None else float(fraction))

    def _model_name(self, spec: ModelSpec) -> str:
        return str(getattr(self._loaded, "name", None) or spec.source)

    def _open_recorder(self, previous: int | None = None) -> Any:
        if self._store_factory is None:
            return None
        try:
            from app.journal_import import recorder_for  # imported late: the store is optional for the window

            if self._store is None:
                from app.store import DEFAULT_BUSY_TIMEOUT

                with self._writing(DEFAULT_BUSY_TIMEOUT):  # opening may write (a dead process's session marked)
                    self._store = self._store_factory()
            return recorder_for(self._store, notify=self.recording_failed.emit, previous=previous)  # busy: a journal
        except Exception as error:
            self.recording_failed.emit(f"This run is not being saved: {describe_error(error)}")
            return None

    @staticmethod
    def _lock_wait(recorder: Any, event: Any = None) -> float | None:
        """How long recording `event` (None: closing the run) may wait for another program's lock: the database
        file's busy timeout, or None where it writes no file (an in-memory store, a test's stand-in)."""
        store = recorder.store
        if getattr(store, "path", None) is None:
            return None
        if event is None:
            writes = recorder.journal_path is not None or not recorder.finished
        else:
            writes = recorder.writes_database(event)
        return float(store.busy_timeout) if writes else None

    @contextlib.contextmanager
    def _writing(self, limit_s: float | None) -> Iterator[None]:
        """Around a write to the session database (`limit_s` None: none): it waits up to `limit_s` for another
        program's lock before the event it records reaches the window, so the bridge says so if it lasts."""
        if limit_s is None:
            yield
            return
        self.database_write_began.emit(float(limit_s))
        try:
            yield
        finally:
            self.database_write_ended.emit()

    def close_store(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def _close(self, recorder: Any) -> None:
        """A run that ended without its terminal event (an engine fault) is marked interrupted."""
        if recorder is None:
            return
        try:
            with self._writing(self._lock_wait(recorder)):  # the Run button waits on it too
                recorder.close()
                path = getattr(recorder, "journal_path", None)  # closing may have moved the run to a journal
                if path is not None:
                    self._import_journal(recorder.store, path)
        except Exception as error:
            self.recording_failed.emit(f"The end of this run was not saved: {describe_error(error)}")

    def _import_journal(self, store: Any, path: Any) -> None:
        """The database may be free again by the run's end: then the session appears whole at once."""
        from app.journal_import import import_journals

        written = import_journals(store, only=path)
        if written:
            self.session_recorded.emit(int(written[0]))
            self.recording_failed.emit(f"The session database is free again: this run was saved whole from {path}.")
        elif not Path(path).exists():  # another Beamwise process opened the database first and imported it
            self.recording_failed.emit(f"This run was saved whole from {path} by another Beamwise process that "
                                       "opened the session database.")
        else:
            self.recording_failed.emit(f"The session database still cannot be written (busy, read-only or its disk "
                                       f"full): this run is kept whole in the journal {path} and is saved the next "
                                       "time Beamwise opens the database.")

    def _record(self, recorder: Any, event: Any) -> Any:
        """Write one event; on a storage fault say so once and stop recording this run."""
        if recorder is None:
            return None
        try:
            limit = self._lock_wait(recorder, event)
            if limit is not None:  # its first write reads every page (0.15 s per 100 MB), not a wait for the lock
                recorder.store.check_pages()
            with self._writing(limit):
                recorder.write(event)
        except Exception as error:
            if type(error).__name__ == "StoreLocked":  # the recorder keeps the step and retries on the next write
                self.recording_failed.emit(f"The session database is busy; steps are kept and saved when it frees: "
                                           f"{describe_error(error)}")
                return recorder
            self.recording_failed.emit(f"Saving this run stopped: {describe_error(error)}")
            return None
        if isinstance(event, ev.RunStarted):
            session_id = getattr(recorder, "session_id", None)
            if session_id is not None:
                self.session_recorded.emit(int(session_id))
        return recorder


class SearchBridge(QObject):
    """GUI-side handle: owns the engine thread, the worker and the stop flag.

    It re-emits every worker signal from the GUI thread (signal-to-signal connections queued to
    this object), so whatever connects here, plain functions included, runs on the GUI thread.
    """

    load_requested = Signal(object, str)
    run_requested = Signal(str, object, object, object, object)
    remote_run_requested = Signal(str, object, object, object)
    release_requested = Signal()

    load_progress = Signal(str, float)  # a stage before the search speaks (a model load, a wait for the database)
    model_loaded = Signal(str, str)
    load_failed = Signal(str)
    event_emitted = Signal(object)
    session_recorded = Signal(int)
    recording_failed = Signal(str)
    failed = Signal(object)  # a RunFailed
    run_finished = Signal()
    memory_released = Signal(object, object)

    def __init__(self, *, loader: LoaderFn | None = None, run: RunFn | None = None,
                 store_factory: StoreFactory | None = None, remote_run: RemoteRunFn | None = None,
                 release: ReleaseFn | None = None, idle_release_ms: int = IDLE_RELEASE_MS,
                 parent: QObject | None = None) -> None:
        """`idle_release_ms` after a run ends with no new request, the engine gives back the device memory and
        pinned RAM torch keeps cached (a game started meanwhile gets them); the loaded model stays."""
        super().__init__(parent)
        self.stop_flag = threading.Event()
        self.closing = threading.Event()
        self.worker = SearchWorker(self.stop_flag, loader=loader, run=run, store_factory=store_factory,
                                   remote_run=remote_run, release=release, closing=self.closing)
        self.thread = QThread()
        self.thread.setObjectName("beamwise-engine")
        self.worker.moveToThread(self.thread)
        self.load_requested.connect(self.worker.load)
        self.run_requested.connect(self.worker.run_search)
        self.remote_run_requested.connect(self.worker.run_remote)
        self.release_requested.connect(self.worker.release_memory)
        for name in ("load_progress", "model_loaded", "load_failed", "event_emitted", "session_recorded",
                     "recording_failed", "failed", "run_finished", "memory_released"):
            getattr(self.worker, name).connect(getattr(self, name))
        self.idle = QTimer(self)  # runs on the GUI thread; the release itself runs in the worker, between requests
        self.idle.setSingleShot(True)
        self.idle.setInterval(idle_release_ms)
        self.idle.timeout.connect(self.release_requested)
        self.run_finished.connect(self.idle.start)
        self._database_wait = QTimer(self)  # a database write that lasts: said as a stage of the request
        self._database_wait.setInterval(DATABASE_WAIT_SAID_MS)
        self._database_wait.timeout.connect(self._say_database_wait)
        self._database_waited, self._database_limit = QElapsedTimer(), 0.0
        self.worker.database_write_began.connect(self._database_write_began)
        self.worker.database_write_ended.connect(self._database_wait.stop)
        self.thread.start()

    @Slot(float)
    def _database_write_began(self, limit_s: float) -> None:
        self._database_limit = limit_s
        self._database_waited.start()
        self._database_wait.start()

    @Slot()
    def _say_database_wait(self) -> None:
        """Each half second a write still waits: the wait as a stage (load_progress), filling up to the busy timeout.
        The heartbeat said "loading the model, 5.1 s" for the 5 s the database's lock held the run's start."""
        waited = self._database_waited.elapsed() / 1000
        fraction = min(1.0, waited / self._database_limit) if self._database_limit > 0 else -1.0
        self.load_progress.emit(database_wait_text(waited, self._database_limit), fraction)

    def request_load(self, spec: ModelSpec, device: str = "auto") -> None:
        self.idle.stop()
        self.load_requested.emit(spec, device)

    def request_run(self, question: str, spec: ModelSpec, search: SearchConfig, cache: CacheConfig,
                    conversation: Conversation | None = None) -> None:
        """A local search; `conversation` makes it a turn after earlier ones (its prompt holds them)."""
        # Cleared here, in request order, so a Stop pressed after this call is never lost.
        self.stop_flag.clear()
        self.idle.stop()
        self.run_requested.emit(question, spec, search, cache, conversation)

    def request_remote_run(self, question: str, server: Any, search: SearchConfig,
                           conversation: Conversation | None = None) -> None:
        """A search on a generator server (engine.backends.openai.ServerConfig); recorded like a local one."""
        self.stop_flag.clear()
        self.idle.stop()
        self.remote_run_requested.emit(question, server, search, conversation)

    def stop(self) -> None:
        """Ask the running search to end at its next decode step (it yields RunCancelled)."""
        self.stop_flag.set()

    def shutdown(self) -> None:
        """Stop any search, abandon a model load, and join the engine thread. Safe to call twice."""
        self.idle.stop()
        self._database_wait.stop()
        if not self.thread.isRunning():
            return
        self.stop_flag.set()
        self.closing.set()
        self.thread.quit()
        self.thread.wait()
        self.worker.close_store()  # the thread has ended, so nothing else is using the store
