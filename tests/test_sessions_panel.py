"""SessionsPanel offscreen: listing, live search, rename, delete with confirmation, export and signals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QLineEdit, QMenu, QMessageBox

from app.gui.sessions_panel import SessionsPanel
from app.gui.sessions_table import COLUMNS
from app.recorder import SessionRecorder
from app.store import SessionStore
from app.store_errors import StoreDamaged
from benchmarks.fake_search import fake_run
from engine.config import SearchConfig

QUESTIONS = ("How fast is the train?", "Why is the sky blue?", "What is 12 * 7?")


@pytest.fixture
def store() -> SessionStore:
    store = SessionStore(memory=True)
    for question in QUESTIONS:
        recorder = SessionRecorder(store)
        stopped: list = []
        cancel = "sky" in question
        for event in fake_run(question, SearchConfig(beams=2, width=2, max_steps=3),
                              should_stop=lambda s=stopped, c=cancel: c and len(s) >= 1):
            recorder.write(event)
            if event.type == "step_selected":
                stopped.append(event)
    return store


@pytest.fixture
def panel(qtbot, store: SessionStore) -> SessionsPanel:
    widget = SessionsPanel(store)
    qtbot.addWidget(widget)
    widget.resize(800, 400)
    widget.show()
    return widget


def cell(panel: SessionsPanel, row: int, column: str) -> str:
    return panel.model.data(panel.model.index(row, COLUMNS.index(column)))


def test_a_conversation_is_one_row_with_its_turn_count(qtbot, store: SessionStore) -> None:
    first = store.list_sessions()[-1]["id"]
    recorder = SessionRecorder(store, previous=first)
    for event in fake_run("And in miles?", SearchConfig(beams=2, width=2, max_steps=3)):
        recorder.write(event)
    widget = SessionsPanel(store)
    qtbot.addWidget(widget)
    assert widget.model.rowCount() == 3  # the follow-up joined its conversation's row
    row = widget.model.row_of(recorder.session_id)
    assert row is not None and cell(widget, row, "turns") == "2"
    assert cell(widget, row, "title") == QUESTIONS[0]  # the conversation's title: its first turn's
    widget.search.setText("miles")
    qtbot.keyClick(widget.search, Qt.Key.Key_Return)
    assert widget.model.rowCount() == 1
    widget.search.setText(QUESTIONS[0][:10])  # its first turn's question finds it too
    qtbot.keyClick(widget.search, Qt.Key.Key_Return)
    assert widget.model.session_id(0) == recorder.session_id


def test_lists_sessions_newest_first_with_their_columns(panel: SessionsPanel) -> None:
    assert panel.model.rowCount() == 3 and panel.model.columnCount() == 6
    assert [cell(panel, r, "turns") for r in range(3)] == ["1", "1", "1"]  # one-turn conversations
    assert [cell(panel, r, "title") for r in range(3)] == list(reversed(QUESTIONS))
    assert cell(panel, 1, "status") == "cancelled" and cell(panel, 0, "status") == "finished"
    assert cell(panel, 0, "model") == "synthetic:fake" and cell(panel, 0, "answer") == "The answer is 80 km/h."
    assert len(cell(panel, 0, "created")) == 16
    assert panel.model.headerData(0, Qt.Orientation.Horizontal) == "Title"
    assert not panel.buttons["delete"].isEnabled()  # nothing selected yet
    panel.select(panel.model.session_id(0))
    assert panel.buttons["delete"].isEnabled()


def test_search_filters_once_typing_pauses(qtbot, panel: SessionsPanel, store: SessionStore,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    queries = []
    monkeypatch.setattr(store, "query", lambda *args, query=store.query: queries.append(args) or query(*args))
    qtbot.keyClicks(panel.search, "sky")
    assert queries == [] and panel.model.rowCount() == 3  # no search at each key: typing never waits for one
    qtbot.waitUntil(lambda: panel.model.rowCount() == 1)
    assert [cell(panel, r, "title") for r in range(panel.model.rowCount())] == ["Why is the sky blue?"]
    assert len(queries) == 1
    panel.search.clear()
    assert panel.model.rowCount() == 3  # an emptied box lists at once
    qtbot.keyClicks(panel.search, "80 km/h")  # answers are searched too
    qtbot.keyClick(panel.search, Qt.Key.Key_Return)  # Enter does not wait
    assert panel.model.rowCount() == 2


def test_search_finds_a_title_whatever_its_case_in_any_script(qtbot, store: SessionStore) -> None:
    for question in ("Wie viele ÄPFEL?", "ΣΟΦΙΑ", "İstanbul"):
        recorder = SessionRecorder(store)
        for event in fake_run(question):
            recorder.write(event)
    panel = SessionsPanel(store)
    qtbot.addWidget(panel)
    for typed, title in (("äpfel", "Wie viele ÄPFEL?"), ("σοφια", "ΣΟΦΙΑ"), ("istanbul", "İstanbul")):
        panel.search.setText(typed)
        qtbot.waitUntil(lambda title=title: [cell(panel, r, "title") for r in range(panel.model.rowCount())] == [title])


def test_rename_with_f2(qtbot, panel: SessionsPanel, store: SessionStore) -> None:
    sid = panel.model.session_id(2)
    panel.select(sid)
    panel.view.setCurrentIndex(panel.model.index(2, 0))
    panel.view.setFocus()
    qtbot.keyClick(panel.view, Qt.Key.Key_F2)
    editor = panel.view.findChild(QLineEdit)
    assert editor is not None and editor.text() == "How fast is the train?"
    editor.setText("Train speed")
    with qtbot.waitSignal(panel.session_renamed) as blocker:
        qtbot.keyClick(editor, Qt.Key.Key_Return)
    assert blocker.args == [sid, "Train speed"]
    assert store.get_session(sid)["title"] == "Train speed" and cell(panel, 2, "title") == "Train speed"


def test_rename_to_nothing_is_refused_and_said(panel: SessionsPanel, store: SessionStore, warnings) -> None:
    sid = panel.model.session_id(0)
    assert not panel.model.setData(panel.model.index(0, 0), "   ")
    assert store.get_session(sid)["title"] == QUESTIONS[-1]
    assert [title for title, _ in warnings] == ["Could not rename the session"]


def test_delete_key_asks_first(qtbot, panel: SessionsPanel, store: SessionStore,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    reply = [QMessageBox.StandardButton.No]

    def question(parent, title, text, *args):
        asked.append(text)
        return reply[0]

    monkeypatch.setattr(QMessageBox, "question", question)
    sid = panel.model.session_id(0)
    panel.select(sid)
    panel.view.setFocus()
    qtbot.keyClick(panel.view, Qt.Key.Key_Delete)
    assert "What is 12 * 7?" in asked[0] and store.get_session(sid)
    reply[0] = QMessageBox.StandardButton.Yes
    qtbot.keyClick(panel.view, Qt.Key.Key_Delete)
    assert panel.model.rowCount() == 2 and panel.model.row_of(sid) is None
    assert [s["id"] for s in store.list_sessions()] == [panel.model.session_id(0), panel.model.session_id(1)]


def test_open_and_run_again_signals(qtbot, panel: SessionsPanel) -> None:
    sid = panel.model.session_id(1)
    panel.select(sid)
    with qtbot.waitSignal(panel.open_requested) as opened:
        panel.buttons["open"].click()
    with qtbot.waitSignal(panel.run_again_requested) as again:
        panel.buttons["run_again"].click()
    assert opened.args == [sid] and again.args == [sid]
    rect = panel.view.visualRect(panel.model.index(1, 1))
    with qtbot.waitSignal(panel.open_requested, timeout=1000) as double:
        qtbot.mouseClick(panel.view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        qtbot.mouseDClick(panel.view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert double.args == [sid]
    panel.view.setFocus()
    with qtbot.waitSignal(panel.open_requested, timeout=1000) as entered:
        qtbot.keyClick(panel.view, Qt.Key.Key_Return)
    assert entered.args == [sid]
    with qtbot.waitSignal(panel.open_requested, timeout=1000) as keypad:  # the number pad's Enter opens it too
        qtbot.keyClick(panel.view, Qt.Key.Key_Enter, Qt.KeyboardModifier.KeypadModifier)
    assert keypad.args == [sid]
    assert [a.text() for a in panel.context_menu().actions() if a.text()] == [
        "Open", "Run again", "Rename", "Export…", "Delete…"]



def test_right_clicks_all_day_keep_one_menu(qtbot, panel: SessionsPanel) -> None:
    """Each right click built a new menu, a child of the panel that lived as long as the window: a window open
    all day gathered a menu and its six actions per click."""
    rect = panel.view.visualRect(panel.model.index(0, 1))
    counts = []
    for _ in range(5):
        panel.view.customContextMenuRequested.emit(rect.center())
        menus = panel.findChildren(QMenu)
        assert menus[-1].isVisible() and panel.selected_id() == panel.model.session_id(0)
        menus[-1].hide()
        counts.append((len(menus), len(panel.findChildren(QAction))))
    assert counts == [counts[0]] * 5 and counts[0][0] == 1


def test_export_through_the_dialog(qtbot, panel: SessionsPanel, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "train"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), "Web page (*.html)"))
    sid = panel.model.session_id(2)
    panel.select(sid)
    with qtbot.waitSignal(panel.exported) as done:
        panel.buttons["export"].click()
    assert done.args == [sid, str(tmp_path / "train.html")]
    assert (tmp_path / "train.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_export_errors_are_shown_not_raised(panel: SessionsPanel, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    warnings: list[str] = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(tmp_path / "no" / "s.md"), ""))
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a: warnings.append(text))
    assert panel.export_with_dialog(panel.model.session_id(0)) is None
    assert "does not exist" in warnings[0]
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: ("", ""))  # cancelled
    assert panel.export_with_dialog(panel.model.session_id(0)) is None and len(warnings) == 1


def test_a_broken_store_shows_a_message(qtbot, store: SessionStore) -> None:
    state = {"broken": True}

    def source() -> SessionStore:
        if state["broken"]:
            raise StoreDamaged("the session database x.db is damaged (file is not a database)")
        return store

    panel = SessionsPanel(source)
    qtbot.addWidget(panel)
    assert panel.model.rowCount() == 0 and "damaged" in panel.message.text() and not panel.message.isHidden()
    state["broken"] = False
    panel.refresh()
    assert panel.model.rowCount() == 3 and panel.message.isHidden()


def test_refresh_keeps_the_selection(panel: SessionsPanel, store: SessionStore) -> None:
    sid = panel.model.session_id(1)
    panel.select(sid)
    recorder = SessionRecorder(store)
    for event in fake_run("A new one"):
        recorder.write(event)
    panel.refresh()
    assert panel.model.rowCount() == 4 and panel.selected_id() == sid


def test_the_sessions_table_model_keeps_qts_model_contract(qtbot, qtlog, store: SessionStore):
    from PySide6.QtTest import QAbstractItemModelTester

    from app.gui.sessions_table import SessionsTableModel

    renamed: list[tuple[int, str]] = []
    model = SessionsTableModel(lambda sid, title: renamed.append((sid, title)) or True)
    tester = QAbstractItemModelTester(model, QAbstractItemModelTester.FailureReportingMode.Warning)
    model.set_rows(store.list_sessions())  # the tester checks every signal and answer on the way
    assert model.rowCount() == len(QUESTIONS) and model.columnCount() == len(COLUMNS)
    title = model.index(1, COLUMNS.index("title"))
    assert model.setData(title, "  A   new title ")
    assert renamed == [(model.session_id(1), "A new title")] and model.data(title) == "A new title"
    assert not model.setData(model.index(1, COLUMNS.index("model")), "x")  # only the title is editable
    model.set_rows(store.list_sessions("sky"))
    assert model.rowCount() == 1
    model.set_rows([])
    assert model.rowCount() == 0 and tester is not None
    assert [r.message for r in qtlog.records if "FAIL" in r.message or "model" in r.message.lower()] == []


def test_a_long_history_lists_the_newest_page_and_shows_older_on_request(qtbot, store, monkeypatch) -> None:
    import app.gui.sessions_panel as sessions_panel

    monkeypatch.setattr(sessions_panel, "PAGE", 2)  # three conversations: a page of two, then the third
    widget = SessionsPanel(store)
    qtbot.addWidget(widget)
    widget.show()
    assert widget.model.rowCount() == 2 and widget.older.isVisible()
    assert [cell(widget, row, "title") for row in range(2)] == list(reversed(QUESTIONS))[:2]
    widget.older.click()
    assert widget.model.rowCount() == 3 and not widget.older.isVisible()
    assert cell(widget, 2, "title") == QUESTIONS[0]


def test_sessions_another_process_recorded_are_listed_when_the_tab_shows_again(qtbot, tmp_path) -> None:
    """The window open while `beamwise run` records into the same database: the tab kept its first listing until
    the window's own next run ended, and a run whose process was killed stayed 'running' for ever."""
    import subprocess
    import sys

    path = tmp_path / "s.db"
    window_store = SessionStore(path)
    widget = SessionsPanel(window_store)
    qtbot.addWidget(widget)
    widget.show()
    assert widget.model.rowCount() == 0
    widget.hide()  # another tab of the dock is in front

    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait()
    with SessionStore(path) as cli:  # another process: one run finished, one whose process died mid-run
        recorder = SessionRecorder(cli)
        for event in fake_run("What is 12 * 7?", SearchConfig(beams=2, width=2, max_steps=2)):
            recorder.write(event)
        dead = cli.create_session({"question": "Killed mid-run?", "pid": killed.pid, "host": None})
    widget.show()
    assert widget.model.rowCount() == 2
    assert cell(widget, widget.model.row_of(dead), "status") == "interrupted"
    assert cell(widget, widget.model.row_of(recorder.session_id), "status") == "finished"
    window_store.close()
