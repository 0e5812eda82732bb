"""A run whose session database another program holds locked says it waits for the database, not for the model.

The window said "loading the model, 1.1 s" ... "5.1 s" (tiny-llama loads in 0.0 s) while the run's first write waited
out the database's busy timeout, because the run's start reaches the window only once it is recorded."""

from __future__ import annotations

import sqlite3

import pytest

pytest.importorskip("pytestqt")

from app.gui.bridge import SearchBridge
from app.heartbeat import StepProgress
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import CacheConfig, ModelSpec, SearchConfig
from tests.test_gui_bridge import CountingLoader, run_fake

WAITING = "Waiting for the session database"
BUSY_S = 3.0  # the store's busy timeout in these tests (5 s by default)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def locked(tmp_path):
    """`(path, holder)`: a session database and a second connection holding BEGIN EXCLUSIVE on it."""
    path = tmp_path / "s.db"
    SessionStore(path).close()
    holder = sqlite3.connect(str(path), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    yield path, holder
    if holder.in_transaction:
        holder.execute("COMMIT")
    holder.close()


def test_a_wait_is_the_line_until_the_search_speaks_and_the_phase_it_held_goes_on():
    clock = Clock()
    progress = StepProgress(clock)
    clock.now += 2
    progress.wait(f"{WAITING}, 1.0 s of at most 5 s: another program holds it locked")
    assert progress.waiting and progress.line() == f"{WAITING}, 1.0 s of at most 5 s: another program holds it locked"
    clock.now += 1
    progress.apply(ev.StepStarted(step=1, beams=()))
    assert not progress.waiting and progress.line().startswith("step 1: decoding, 0 s")
    progress.wait("held")
    clock.now += 3
    progress.apply(ev.GroupScheduled(step=1, group=0, candidates=(1,), prefetched=()))
    assert progress.line().startswith("step 1: decoding, 3.0 s, 1 group(s) done")  # its clock ran on


def test_the_recorder_says_which_events_write_the_database(tmp_path):
    events = list(fake_run("q", SearchConfig(beams=1, width=2, max_steps=2)))
    file_db = SessionRecorder(SessionStore(tmp_path / "s.db"))
    writes = []
    for event in events:
        writes.append(file_db.writes_database(event))
        file_db.write(event)
    kinds = [e.type for e, w in zip(events, writes, strict=True) if w]
    assert kinds == ["run_started", "step_selected", "step_selected", "run_finished"]
    memory = SessionRecorder(SessionStore(memory=True))  # no other program can lock a private in-memory database
    assert not memory.writes_database(events[0])


def test_the_bridge_says_a_write_that_waits_for_the_lock_before_the_run_starts(qtbot, locked):
    path, holder = locked
    bridge = SearchBridge(loader=CountingLoader(), run=run_fake,
                          store_factory=lambda: SessionStore(path, busy_timeout=BUSY_S))
    said: list[tuple[str, float]] = []
    order: list[str] = []
    bridge.load_progress.connect(lambda message, fraction: said.append((message, fraction)))
    bridge.load_progress.connect(lambda message, _fraction: order.append("wait" if WAITING in message else message))
    bridge.event_emitted.connect(lambda event: order.append(event.type))
    try:
        with qtbot.waitSignal(bridge.load_progress, timeout=5000,
                              check_params_cb=lambda message, _fraction: WAITING in message):
            bridge.request_run("q", ModelSpec(source="synthetic:fake"), SearchConfig(beams=2, width=2, max_steps=2),
                               CacheConfig())
        holder.execute("COMMIT")  # the other program lets go: the run goes on and is recorded in the database
        with qtbot.waitSignal(bridge.run_finished, timeout=10_000):
            pass
    finally:
        bridge.shutdown()
    waits = [(m, f) for m, f in said if WAITING in m]
    message, fraction = waits[0]
    assert message.endswith(f"of at most {BUSY_S:g} s: another program holds it locked") and 0 < fraction < 1
    assert order.index("wait") < order.index("run_started")  # said while the run's start waited to be recorded
    with SessionStore(path) as store:
        assert [s["status"] for s in store.list_sessions()] == ["finished"]


def test_the_window_says_it_waits_for_the_database_not_for_the_model(qtbot, make_window, locked):
    path, holder = locked
    window = make_window(store_factory=lambda: SessionStore(path, busy_timeout=BUSY_S))
    window.controls.set_configs(ModelSpec(source="synthetic:fake"), SearchConfig(beams=2, width=2, max_steps=3),
                                CacheConfig())
    window.question.setPlainText("How fast is the train?")
    messages: list[str] = []
    seen: dict[str, bool] = {}

    def said(message: str) -> None:
        messages.append(message)
        if WAITING in message and not seen:  # what the window shows while it waits, then the lock goes
            seen.update(banner=not window.status.banner.isHidden(), progress=not window.status.progress.isHidden())
            holder.execute("COMMIT")

    window.statusBar().messageChanged.connect(said)
    with qtbot.waitSignal(window.run_ended, timeout=15_000) as ended:
        assert window.start_run()
    assert isinstance(ended.args[0], ev.RunFinished)
    waits = [m for m in messages if WAITING in m]
    assert waits and waits[0].endswith("another program holds it locked"), messages
    assert seen == {"banner": True, "progress": False}  # the banner's bar; the status bar's line has the words
    first = messages.index(waits[0])
    assert not [m for m in messages[first:] if m.startswith("loading the model")], messages
    assert window.status.banner.isHidden() and not window.status.live.waiting
    assert window.current_session is not None  # recorded in the database once it was free
