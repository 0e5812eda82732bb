"""A Stop or a close while the model reads the question: the status bar says what the stop waits for until the run
ends (the heartbeat said "reading the question, 1.8 s" again a second after Esc), and a closed window stays
responsive while it waits for the chunk, then closes by itself (closeEvent waited for the engine's thread on the GUI
thread: 47 s frozen)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QTimer

from app.gui import status_line
from app.heartbeat import StepProgress
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import CacheConfig, ModelSpec, SearchConfig

STOPPING = "stopping after the chunk of the question being read…"
CLOSING = "closing after the chunk of the question being read…"


def one_long_chunk(gate: threading.Event):
    """fake_run whose question takes one chunk that ends when the test opens `gate` (a chunk has no stop point
    inside): a stop asked meanwhile ends the run after it, as engine/search.py does (RunCancelled(0))."""

    def run(question: str, loaded: Any, search: SearchConfig, cache: CacheConfig, *, should_stop: Any) -> Iterator:
        events = fake_run(question, search, cache, should_stop=should_stop)
        yield next(events)  # RunStarted: the model reads the question now
        gate.wait(timeout=10)
        if should_stop():
            yield ev.RunCancelled(0)
            return
        yield from events

    return run


@pytest.fixture
def reading(qtbot, make_window, monkeypatch):
    """A window whose run is reading a long question (a heartbeat each 100 ms), and the gate that ends its chunk."""
    monkeypatch.setattr(status_line, "HEARTBEAT_MS", 100)
    gate = threading.Event()
    window = make_window(run=one_long_chunk(gate))
    window.controls.set_configs(ModelSpec(source="synthetic:fake"), SearchConfig(beams=2, width=2, max_steps=2),
                                CacheConfig())
    window.question.setPlainText("How fast is the train?")
    window.show()
    assert window.start_run()
    qtbot.waitUntil(lambda: window.status.live.phase == "prefill", timeout=5000)
    yield window, gate
    gate.set()


def heartbeats(qtbot, window, count: int) -> list[str]:
    """The status bar's line at each of the next `count` heartbeats."""
    said: list[str] = []

    def beat() -> None:
        said.append(window.statusBar().currentMessage())

    window.status._beat.timeout.connect(beat)
    qtbot.waitUntil(lambda: len(said) >= count, timeout=5000)
    window.status._beat.timeout.disconnect(beat)
    return said


def test_the_stop_line_lasts_while_the_chunk_is_read(qtbot, reading):
    window, gate = reading
    window.stop_action.trigger()
    assert window.statusBar().currentMessage() == "Stopping: no step has begun yet: the run ends before step 1…"
    said = heartbeats(qtbot, window, 5)
    assert said[1:] == [STOPPING] * 4, said  # the first may come before the heartbeat's quiet second
    with qtbot.waitSignal(window.run_ended, timeout=5000) as ended:
        gate.set()
    assert isinstance(ended.args[0], ev.RunCancelled)
    assert window.statusBar().currentMessage().startswith("Stopped")


def test_closing_while_the_chunk_is_read_keeps_the_window_responsive_then_closes(qtbot, reading):
    window, gate = reading
    closed: list[bool] = []
    QTimer.singleShot(0, lambda: closed.append(window.close()))  # as a click on the title bar: in the event loop
    qtbot.waitUntil(lambda: bool(closed), timeout=5000)
    assert closed == [False] and window.isVisible()  # the close came back at once, the chunk still being read
    assert window.bridge.thread.isRunning() and window.bridge.stop_flag.is_set()
    assert window.statusBar().currentMessage() == CLOSING
    assert heartbeats(qtbot, window, 3)[1:] == [CLOSING] * 2
    window.stop_action.trigger()  # Esc meanwhile changes nothing
    assert window.statusBar().currentMessage() == CLOSING
    gate.set()
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=5000)  # it closed by itself once the run ended
    assert window.bridge.thread.wait(5000) and isinstance(window.last_terminal, ev.RunCancelled)


def test_a_second_close_closes_now(qtbot, reading):
    window, gate = reading
    closed: list[bool] = []

    def close_twice() -> None:
        closed.append(window.close())
        gate.set()  # the chunk ends while the second close waits for the engine's thread
        closed.append(window.close())

    QTimer.singleShot(0, close_twice)
    qtbot.waitUntil(lambda: len(closed) == 2, timeout=5000)
    assert closed == [False, True] and not window.isVisible() and window.bridge.thread.isFinished()


def test_a_close_outside_the_event_loop_closes_now(reading):
    """After the app's exec (app/gui/launch.py closes the window then) nothing would bring the run's end."""
    window, gate = reading
    gate.set()
    assert window.close() and not window.isVisible() and window.bridge.thread.isFinished()


def test_the_progress_says_the_stop_until_the_run_ends():
    progress = StepProgress(clock=lambda: 0.0)
    assert progress.stop_asked() and progress.line() == "stopping before the search starts: nothing will be recorded"
    progress.apply(SimpleNamespace(type="run_started", search={"beams": 2, "width": 2}))
    assert progress.line() == "stopping after the chunk of the question being read"
    progress.wait_for_database(5.0)  # what it waits on now is said first
    assert progress.line().startswith("waiting for the session database")
    progress.resume()
    assert progress.stop_asked(" (Ctrl+C again to quit now)")  # beamwise run's words
    assert progress.line() == "stopping after the chunk of the question being read (Ctrl+C again to quit now)"
    progress.apply(SimpleNamespace(type="run_cancelled"))
    assert progress.phase == "done"


def test_within_a_step_the_progress_line_is_left_as_it_is():
    progress = StepProgress(clock=lambda: 0.0)
    progress.apply(SimpleNamespace(type="run_started", search={"beams": 1, "width": 2}))
    progress.apply(SimpleNamespace(type="step_started", step=1, beams=()))
    assert not progress.stop_asked() and progress.line().startswith("step 1: decoding")
