"""Conversations in the window: a follow-up asked in the follow-up box on the real engine (synthetic:tiny-llama),
a stored two-turn conversation opened from the sessions panel with its turn tabs, Run again of a later turn,
and New conversation (Ctrl+N)."""

from __future__ import annotations

import dataclasses
import html
import threading
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QMessageBox

from app.conversations import line_of
from app.gui.bridge import SearchBridge
from app.gui.main_window import MainWindow
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.models import load_model
from engine.search import SYSTEM_PROMPT
from tests.test_gui_bridge import CountingLoader

FIRST, SECOND = "What is 2+3?", "And times 4?"
SMALL = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=4)


@pytest.fixture
def window_for(keep_window, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    stores: list[SessionStore] = []
    db = tmp_path / "s.db"

    def make(**bridge: Any) -> MainWindow:
        stores.append(SessionStore(db))
        return keep_window(MainWindow(SearchBridge(store_factory=lambda: SessionStore(db), **bridge),
                                      store=stores[-1], dialogs=False,
                                      settings=QSettings(str(tmp_path / "b.ini"), QSettings.Format.IniFormat)))

    yield make
    for store in stores:
        store.close()


def run_to_end(qtbot, window: MainWindow, start) -> Any:
    with qtbot.waitSignal(window.run_ended, timeout=60000) as blocker:
        start()
    return blocker.args[0]


def test_a_follow_up_asked_in_the_window_is_the_next_turn_of_the_conversation(qtbot, window_for) -> None:
    window = window_for()  # the real engine and loader
    window.controls.set_configs(ModelSpec("synthetic:tiny-llama"), SMALL, CacheConfig())
    window.question.setPlainText(FIRST)
    assert not window.talk.box.field.isEnabled()  # nothing to follow up yet
    first = run_to_end(qtbot, window, window.start_run)
    assert isinstance(first, ev.RunFinished) and window.current_session == 1
    assert window.talk.box.field.isEnabled() and window.talk.turns.isHidden()
    qtbot.keyClicks(window.talk.box.field, SECOND)
    second = run_to_end(qtbot, window, lambda: qtbot.keyClick(window.talk.box.field, Qt.Key.Key_Return))
    assert isinstance(second, ev.RunFinished) and window.current_session == 2
    assert window.talk.box.field.text() == ""  # the asked follow-up left the box
    row = window.store.get_session(2)
    assert (row["conversation_id"], row["turn"], row["previous_id"]) == (1, 2, 1)
    history = ((FIRST, first.answer),)
    assert window.session.outline.history == history and window.session.outline.question == SECOND
    stored = window.store.events(2)
    assert stored[0].history == history
    tiny = load_model(ModelSpec("synthetic:tiny-llama"))
    assert stored[1].prompt_tokens == len(tiny.encode_chat(SECOND, SYSTEM_PROMPT, history))  # the whole conversation
    text = window.panels.transcript.plain_text()
    assert text.index("Turn 1 · Question") < text.index(FIRST) < text.index("Turn 2 · Question") < text.index(SECOND)
    assert first.answer.strip().splitlines()[0] in text
    assert window.talk.turns.isVisibleTo(window) and window.talk.turns.count() == 2
    assert window.talk.turns.currentIndex() == 1 and window.talk.turns.tabText(0) == "Turn 1"


def plan_now(qtbot, window: MainWindow) -> Any:
    """The plan bar's plan of what a Run or a follow-up would send now."""
    with qtbot.waitSignal(window.plan_bar.planned, timeout=30000) as blocker:
        window.plan_bar.refresh_now()
    return blocker.args[0]


def test_the_plan_bar_counts_a_follow_up_with_its_conversation(qtbot, window_for) -> None:
    window = window_for()  # the real engine and loader
    window.controls.set_configs(ModelSpec("synthetic:tiny-llama"), SMALL, CacheConfig())
    window.question.setPlainText(FIRST)
    run_to_end(qtbot, window, window.start_run)
    qtbot.keyClicks(window.talk.box.field, SECOND)
    follow_up = plan_now(qtbot, window)
    shown = html.unescape(window.plan_bar.toolTip())
    run_to_end(qtbot, window, lambda: qtbot.keyClick(window.talk.box.field, Qt.Key.Key_Return))
    assert follow_up.prompt_tokens == window.store.events(2)[1].prompt_tokens  # the run's PrefillDone
    assert f"{follow_up.prompt_tokens:,} tokens (counted by the model's tokenizer, 1 earlier turn" in shown
    bare = plan_now(qtbot, window)  # the box is empty again: Run would ask the question box's text afresh
    assert window.question.toPlainText() == FIRST and bare.prompt_tokens < follow_up.prompt_tokens  # kept as typed
    shown = html.unescape(window.plan_bar.toolTip())
    assert f"{bare.prompt_tokens:,} tokens (counted by the model's tokenizer)" in shown


def _record(store: SessionStore, question: str, previous: int | None = None) -> int:
    history = tuple((r["question"], r["answer"]) for r in line_of(store, previous)) if previous else ()
    recorder = SessionRecorder(store, previous=previous)
    for event in fake_run(question, SMALL):
        recorder.write(dataclasses.replace(event, history=history) if isinstance(event, ev.RunStarted) else event)
    return recorder.session_id


def test_a_stored_two_turn_conversation_opens_with_its_turns_and_reruns_a_turn_after_its_own(qtbot,
                                                                                            window_for) -> None:
    seen: list[tuple] = []

    def run(question, loaded, search, cache, *, should_stop, history=()):
        seen.append((question, tuple(history)))
        return fake_run(question, search, cache, should_stop=should_stop)

    window = window_for(loader=CountingLoader(), run=run)
    first = _record(window.store, FIRST)
    second = _record(window.store, SECOND, previous=first)
    window.sessions.refresh()
    assert window.sessions.model.rowCount() == 1  # one conversation...
    assert window.sessions.model.data(window.sessions.model.index(0, 1)) == "2"  # ...of two turns
    window.sessions.open_requested.emit(window.sessions.model.session_id(0))  # open it: its newest turn
    assert window.current_session == second and window.question.toPlainText() == SECOND
    assert window.talk.turns.count() == 2 and window.talk.turns.currentIndex() == 1
    text = window.panels.transcript.plain_text()
    assert "Turn 1 · Question" in text and FIRST in text and "Turn 2 · Question" in text
    window.talk.turns.setCurrentIndex(0)  # the turn tab opens turn 1
    assert window.current_session == first and window.session.outline.history == ()
    assert "Turn 1" not in window.panels.transcript.plain_text()
    answer = window.store.get_session(first)["answer"]

    window.load_session_settings(second)  # Run again of turn 2: after turn 1, as before
    run_to_end(qtbot, window, window.start_run)
    assert seen[-1] == (SECOND, ((FIRST, answer),))
    rerun = window.store.get_session(window.current_session)
    assert (rerun["turn"], rerun["previous_id"]) == (2, first)

    window.talk.new_action.trigger()  # Ctrl+N
    assert window.current_session is None and window.question.toPlainText() == ""
    assert window.talk.turns.isHidden() and not window.talk.box.field.isEnabled()
    window.question.setPlainText("Something new")
    run_to_end(qtbot, window, window.start_run)
    assert seen[-1] == ("Something new", ())  # a new conversation
    assert window.store.get_session(window.current_session)["turn"] == 1
    assert window.talk.new_action.shortcut().toString() == "Ctrl+N"


class Paused:
    """fake_run that waits after step 1 until `go` is set (or a Stop): the test acts while the run is on."""

    def __init__(self) -> None:
        self.go, self.waiting = threading.Event(), threading.Event()

    def __call__(self, question, loaded, search, cache, *, should_stop, history=()):
        for event in fake_run(question, search, cache, should_stop=should_stop):
            yield event
            if isinstance(event, ev.StepSelected) and event.step == 1:
                self.waiting.set()
                while not (self.go.wait(0.01) or should_stop()):
                    pass


def run_until_paused(qtbot, window: MainWindow, paused: Paused, start) -> int:
    """Start a run and wait for it to pause after step 1 with its session recorded; that session's id."""
    start()
    qtbot.waitUntil(lambda: paused.waiting.is_set() and window.current_session is not None, timeout=5000)
    return window.current_session


def test_a_turn_tab_clicked_while_a_follow_up_runs_stays_on_the_running_turn(qtbot, window_for) -> None:
    """The click was refused ("Stop the running search…") but the tab moved: Turn 1 was selected over Turn 2's
    live tree until the run ended. The tabs are disabled while a run is on."""
    paused = Paused()
    window = window_for(loader=CountingLoader(), run=paused)
    window.show()
    window.open_session(_record(window.store, FIRST))
    window.talk.box.field.setText(SECOND)
    running = run_until_paused(qtbot, window, paused, window.talk.box.submit)
    tabs = window.talk.turns
    assert tabs.count() == 2 and tabs.session_ids[tabs.currentIndex()] == running
    qtbot.mouseClick(tabs, Qt.MouseButton.LeftButton, pos=tabs.tabRect(0).center())
    assert tabs.session_ids[tabs.currentIndex()] == running and window.current_session == running
    assert not tabs.isEnabled()
    paused.go.set()
    qtbot.waitUntil(lambda: not window.running, timeout=5000)
    assert tabs.isEnabled() and tabs.session_ids[tabs.currentIndex()] == running


def test_deleting_the_running_session_is_refused_and_the_run_is_kept(qtbot, window_for, monkeypatch) -> None:
    """It was deleted: the run went on with nothing to write to ("Saving this run stopped") and was lost."""
    warned: list[tuple[str, str]] = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a: QMessageBox.StandardButton.Yes)
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, title, text, *a: warned.append((title, text)))
    paused = Paused()
    window = window_for(loader=CountingLoader(), run=paused)
    window.question.setPlainText(FIRST)
    running = run_until_paused(qtbot, window, paused, window.start_run)
    window.sessions.refresh()
    assert window.sessions.select(running)
    window.sessions.delete_selected()
    assert warned and warned[0][0] == "Could not delete the session"
    assert "still being recorded" in warned[0][1] and "Stop the run first" in warned[0][1]
    with qtbot.waitSignal(window.run_ended, timeout=5000):
        paused.go.set()
    assert window.store.get_session(running)["status"] == "finished"
    assert window.current_session == running


def test_deleting_the_open_session_clears_it_from_the_window(qtbot, window_for, monkeypatch) -> None:
    """The window went on showing it: a follow-up said "there is no session 1" and its turn tab stayed."""
    monkeypatch.setattr(QMessageBox, "question", lambda *a: QMessageBox.StandardButton.Yes)
    window = window_for(loader=CountingLoader(), run=lambda q, loaded, s, c, *, should_stop, history=(): fake_run(
        q, s, c, should_stop=should_stop))
    reported: list[tuple[str, str]] = []
    window.error_reported.connect(lambda title, text: reported.append((title, text)))
    first = _record(window.store, FIRST)
    second = _record(window.store, SECOND, previous=first)
    window.open_session(first)
    window.sessions.refresh()
    window.sessions.select(second)
    window.sessions.delete_selected()  # the newest turn: the open turn 1 stays, its tabs lose turn 2
    assert window.current_session == first and window.talk.turns.session_ids == [first]
    window.sessions.select(first)
    window.sessions.delete_selected()
    assert window.current_session is None and not window.panels.tree.data.candidates()
    assert not window.talk.box.field.isEnabled() and window.talk.turns.session_ids == []
    assert "Session 1 was deleted" in window.statusBar().currentMessage() and reported == []


def test_the_turn_a_follow_up_continues_is_not_deleted_while_its_model_loads(qtbot, window_for, monkeypatch) -> None:
    """Deleted then, the follow-up ran on with nothing to follow: 'Saving this run stopped: there is no session 1
    to follow', the new turn lost (the store protects a turn only once a later turn's row exists)."""
    warned: list[tuple[str, str]] = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a: QMessageBox.StandardButton.Yes)
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, title, text, *a: warned.append((title, text)))
    loading, loaded = threading.Event(), threading.Event()

    def slow_loader(spec, device, progress):
        loading.set()
        loaded.wait(10)
        return CountingLoader()(spec, device, progress)

    window = window_for(loader=slow_loader, run=lambda q, _m, s, c, *, should_stop, history=(): fake_run(
        q, s, c, should_stop=should_stop))
    window.open_session(first := _record(window.store, FIRST))
    window.talk.box.field.setText(SECOND)
    window.talk.box.submit()
    qtbot.waitUntil(loading.is_set, timeout=5000)
    window.sessions.refresh()
    window.sessions.select(first)
    window.sessions.delete_selected()
    assert warned and "next turn after session 1" in warned[0][1] and "Stop the search first" in warned[0][1]
    with qtbot.waitSignal(window.run_ended, timeout=5000):
        loaded.set()
    follow_up = window.store.get_session(window.current_session)
    assert (follow_up["previous_id"], follow_up["status"]) == (first, "finished")
    assert window.store.get_session(first) and len(warned) == 1


def test_a_follow_up_whose_model_does_not_load_goes_back_to_its_turn_and_can_be_asked_again(qtbot,
                                                                                         window_for) -> None:
    """The window dropped the conversation: the tree emptied, the follow-up's text was gone and the box said
    'Follow-ups come after a finished answer', so the follow-up could not be asked again after fixing the model."""
    window = window_for(loader=CountingLoader(), run=lambda q, _m, s, c, *, should_stop, history=(): fake_run(
        q, s, c, should_stop=should_stop))
    window.open_session(first := _record(window.store, FIRST))
    window.controls.model_picker.set_source("bad/folder")  # CountingLoader cannot load it
    window.talk.box.field.setText(SECOND)
    with qtbot.waitSignal(window.run_ended, timeout=5000) as ended:
        window.talk.box.submit()
    assert ended.args == [None]  # the request's own end: nothing ran
    assert window.current_session == first and window.question.toPlainText() == FIRST
    assert window.panels.tree.data.candidates() and window.talk.box.field.isEnabled()
    assert window.talk.box.field.text() == SECOND
    assert window.statusBar().currentMessage() == "Could not load the model."
    window.controls.model_picker.set_source("synthetic:fake")
    with qtbot.waitSignal(window.run_ended, timeout=5000):
        window.talk.box.submit()
    turn = window.store.get_session(window.current_session)
    assert (turn["question"], turn["previous_id"], turn["status"]) == (SECOND, first, "finished")


def test_a_loaded_run_again_whose_earlier_turn_is_deleted_runs_as_a_new_conversation(qtbot, window_for,
                                                                                     monkeypatch) -> None:
    """Run again of turn 2, then turn 2 and turn 1 deleted: Run sent turn 1 as history and recorded the run after
    it, which was gone: 'Saving this run stopped: there is no session 1 to follow', the run unsaved."""
    monkeypatch.setattr(QMessageBox, "question", lambda *a: QMessageBox.StandardButton.Yes)
    seen: list[tuple] = []

    def run(question, loaded, search, cache, *, should_stop, history=()):
        seen.append((question, tuple(history)))
        return fake_run(question, search, cache, should_stop=should_stop)

    window = window_for(loader=CountingLoader(), run=run)
    not_saved: list[str] = []
    window.bridge.recording_failed.connect(not_saved.append)
    first = _record(window.store, FIRST)
    second = _record(window.store, SECOND, previous=first)
    window.load_session_settings(second)
    window.sessions.refresh()
    for session_id in (second, first):
        window.sessions.select(session_id)
        window.sessions.delete_selected()
    assert window.store.list_sessions() == []
    run_to_end(qtbot, window, window.start_run)
    assert seen == [(SECOND, ())] and not_saved == []
    rerun = window.store.get_session(window.current_session)
    assert (rerun["question"], rerun["previous_id"], rerun["status"]) == (SECOND, None, "finished")
