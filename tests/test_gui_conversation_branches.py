"""Conversations in the window, as a new user meets them: a follow-up asked on an earlier turn's tab goes after the
newest turn (as `beamwise run --session` does; before, it branched silently and hid the later turns), the older
branch a "Run again" leaves opens from its turn tab's "N runs" button (before, nothing in the window reached it),
and an export of any turn suggests its title's name and says where it wrote."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QFileDialog, QToolButton

from app.conversations import line_of, runs_of_turns
from app.gui.bridge import SearchBridge
from app.gui.conversation import after_hints, retry_hints
from app.gui.main_window import MainWindow
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from tests.test_conversations import record
from tests.test_gui_bridge import CountingLoader

ONE, TWO, THREE, FOUR = "What is 2+3?", "And times 4?", "And minus 1?", "And halved?"


@pytest.fixture
def made(keep_window, tmp_path: Path, monkeypatch) -> Any:
    """(window, store, seen): a window over a file database whose runs are fake_run; `seen` holds each run's
    (question, history)."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    db = tmp_path / "s.db"
    seen: list[tuple[str, tuple]] = []

    def run(question, loaded, search, cache, *, should_stop, history=()):
        seen.append((question, tuple(history)))
        return fake_run(question, search, cache, should_stop=should_stop)

    store = SessionStore(db)
    bridge = SearchBridge(loader=CountingLoader(), run=run, store_factory=lambda: SessionStore(db))
    window = keep_window(MainWindow(bridge, store=store, dialogs=False,
                                    settings=QSettings(str(tmp_path / "b.ini"), QSettings.Format.IniFormat)))
    yield window, store, seen
    store.close()


def three_turns(store: SessionStore) -> list[int]:
    first = record(store, ONE)
    second = record(store, TWO, previous=first)
    return [first, second, record(store, THREE, previous=second)]


def tabs(window: MainWindow) -> list[str]:
    return [window.talk.turns.tabText(i) for i in range(window.talk.turns.count())]


def run_to_end(qtbot, window: MainWindow, start) -> None:
    with qtbot.waitSignal(window.run_ended, timeout=10000):
        start()


def test_a_follow_up_on_an_earlier_tab_is_the_conversations_next_turn_and_the_box_says_so(qtbot, made) -> None:
    window, store, seen = made
    ids = three_turns(store)
    window.show()
    window.open_session(ids[2])
    box = window.talk.box.field
    assert "after Turn" not in box.placeholderText()  # the newest turn is open: a plain follow-up
    window.talk.turns.setCurrentIndex(0)  # the Turn 1 tab
    assert window.current_session == ids[0] and box.isEnabled()
    assert box.placeholderText() in after_hints(3, True) and box.placeholderText().startswith("Follow up after Turn 3")
    box.setText(FOUR)
    assert window.talk.planned_prompt()[1] == tuple((row["question"], row["answer"]) for row in line_of(store, ids[2]))
    run_to_end(qtbot, window, lambda: qtbot.keyClick(box, Qt.Key.Key_Return))
    new = store.get_session(window.current_session)
    assert (new["previous_id"], new["turn"], new["question"]) == (ids[2], 4, FOUR)  # was (1, 2): a silent branch
    assert [q for q, _ in seen[-1][1]] == [ONE, TWO, THREE]
    assert tabs(window) == ["Turn 1", "Turn 2", "Turn 3", "Turn 4"] and window.talk.turns.currentIndex() == 3
    assert window.talk.turns.runs_button(2) is None  # nothing branched


def test_on_an_earlier_tab_a_follow_up_takes_the_place_of_a_newest_turn_without_an_answer(qtbot, made,
                                                                                           tmp_path: Path) -> None:
    """The newest turn has no answer: a follow-up goes in its place, after the turn before it, whichever tab is
    open, and the box says so. It was off ("Turn 3 has no answer to follow up"), and nothing said how to go on."""
    window, store, seen = made
    ids = three_turns(store)
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute("UPDATE sessions SET status = 'cancelled', answer = NULL WHERE id = ?", (ids[2],))
    window.open_session(ids[0])
    assert tabs(window) == ["Turn 1", "Turn 2", "Turn 3 (cancelled)"]
    box = window.talk.box.field
    assert box.isEnabled() and box.placeholderText() in retry_hints(3) and "after Turn 2" in box.placeholderText()
    box.setText(FOUR)
    run_to_end(qtbot, window, lambda: qtbot.keyClick(box, Qt.Key.Key_Return))
    new = store.get_session(window.current_session)
    assert (new["previous_id"], new["turn"], new["question"]) == (ids[1], 3, FOUR)
    assert [q for q, _ in seen[-1][1]] == [ONE, TWO]
    assert tabs(window) == ["Turn 1", "Turn 2", "Turn 3"] and window.talk.turns.runs_button(3) is not None


def test_the_box_is_off_when_no_turn_before_the_newest_has_an_answer(qtbot, made, tmp_path: Path) -> None:
    """Turns 2 and 3 without an answer: there is nothing a follow-up could go after, and the box says why."""
    window, store, _seen = made
    ids = three_turns(store)
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute("UPDATE sessions SET status = 'failed', answer = NULL WHERE id IN (?, ?)", (ids[1], ids[2]))
    window.open_session(ids[0])
    assert not window.talk.box.field.isEnabled()
    assert window.talk.box.field.placeholderText() in after_hints(3, False)


def test_the_older_branch_opens_from_the_runs_button_of_the_turn_where_it_parts(qtbot, made) -> None:
    window, store, seen = made
    ids = three_turns(store)
    window.load_session_settings(ids[2])  # Run again of turn 3, then Run: the conversation branches at turn 3
    run_to_end(qtbot, window, window.start_run)
    rerun = window.current_session
    assert window.talk.turns.session_ids == [ids[0], ids[1], rerun]
    assert window.talk.turns.runs_button(1) is None and window.talk.turns.runs_button(2) is None
    button = window.talk.turns.runs_button(3)
    assert isinstance(button, QToolButton) and button.text() == "2 runs" and button.isVisibleTo(window.talk.turns)
    runs = button.menu().actions()
    assert [a.text() for a in runs] == [f"Run 1 (session {ids[2]}): {THREE}", f"Run 2 (session {rerun}, newest): "
                                        f"{THREE}"]
    assert [a.isChecked() for a in runs] == [False, True]
    runs[0].trigger()  # the older run of turn 3
    assert window.current_session == ids[2] and window.talk.turns.session_ids == ids
    assert window.talk.turns.currentIndex() == 2
    assert [a.isChecked() for a in window.talk.turns.runs_button(3).menu().actions()] == [True, False]
    window.talk.box.field.setText(FOUR)  # a follow-up there continues the older branch
    run_to_end(qtbot, window, window.talk.box.submit)
    assert store.get_session(window.current_session)["previous_id"] == ids[2]
    assert [q for q, _ in seen[-1][1]] == [ONE, TWO, THREE]


def test_runs_of_turns_lists_each_turns_runs_oldest_first(made) -> None:
    _window, store, _seen = made
    ids = three_turns(store)
    again = record(store, THREE, previous=ids[1])
    other = record(store, "Something else?", previous=ids[0])  # a branch at turn 2
    runs = runs_of_turns(store, line_of(store, ids[2]))
    assert [[r["id"] for r in turn] for turn in runs] == [[ids[0]], [ids[1], other], [ids[2], again]]
    assert runs_of_turns(store, []) == []


def test_an_earlier_turns_export_suggests_its_title_and_the_window_says_where_it_wrote(made, tmp_path: Path,
                                                                                     monkeypatch) -> None:
    window, store, _seen = made
    ids = three_turns(store)
    store.rename(ids[0], "Times four")  # the conversation's title: its first turn's (the window's Rename)
    offered: list[str] = []
    target = tmp_path / "out.md"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda _parent, _caption, name, _filters: offered.append(name)
                        or (str(target), "Markdown (*.md)"))
    window.open_session(ids[1])  # turn 2 of 3: not the row the Sessions tab lists
    window.export_current()  # File > Export (Ctrl+E)
    assert offered == ["Times four.md"]  # was "session 2.md"
    assert target.read_text(encoding="utf-8").startswith("#")
    assert window.statusBar().currentMessage() == f"Exported session {ids[1]} to {target}"
