"""Rename and delete in the Sessions tab while another process holds the database's write lock: the window keeps
turning (the write waits off the GUI thread), the buttons are off meanwhile, and a write that cannot be made says so
and changes nothing shown. Before, each blocked the GUI thread for the store's busy timeout (5 s in the app)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QMessageBox

from app.gui.bridge import SearchBridge
from app.gui.main_window import MainWindow
from app.gui.sessions_panel import COLUMNS, SessionsPanel
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine.config import SearchConfig
from tests.test_gui_bridge import CountingLoader

WAIT_S = 1.0  # the store's busy timeout here (5 s in the app)
TRAIN = "How fast is the train?"


def record(store: SessionStore, question: str) -> int:
    recorder = SessionRecorder(store)
    for event in fake_run(question, SearchConfig(beams=2, width=2, max_steps=2)):
        recorder.write(event)
    return recorder.session_id


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "s.db"


@pytest.fixture
def store(db: Path) -> Iterator[SessionStore]:
    with SessionStore(db, busy_timeout=WAIT_S) as opened:
        yield opened


@pytest.fixture
def other(db: Path, store: SessionStore) -> Iterator[sqlite3.Connection]:
    """Another process's connection; `lock(other)` takes the write lock (as `beamwise run` does to commit a step)."""
    conn = sqlite3.connect(db, isolation_level=None)
    yield conn
    conn.close()


@pytest.fixture
def ticks(qtbot) -> list[int]:
    """A timer on the GUI thread: it ticks only while the event loop turns."""
    seen: list[int] = []
    timer = QTimer(interval=20)
    timer.timeout.connect(lambda: seen.append(1))
    timer.start()
    yield seen
    timer.stop()


@pytest.fixture
def warned(monkeypatch, ticks: list[int]) -> list[tuple[str, str, int]]:
    """Each warning shown: its title, its text, and how often the timer had ticked by then."""
    shown: list[tuple[str, str, int]] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, title, text, *a: shown.append((title, text,
                                                                                                len(ticks))))
    return shown


def lock(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")


def panel_over(qtbot, store: SessionStore) -> SessionsPanel:
    panel = SessionsPanel(store)
    qtbot.addWidget(panel)
    panel.show()
    return panel


def title_cell(panel: SessionsPanel, row: int = 0) -> str:
    return panel.model.data(panel.model.index(row, COLUMNS.index("title")))


def test_a_rename_the_database_refuses_waits_off_the_gui_thread_and_keeps_the_old_title(qtbot, store, other,
                                                                                       warned) -> None:
    sid = record(store, TRAIN)
    panel = panel_over(qtbot, store)
    lock(other)
    panel.select(sid)
    assert not panel.model.setData(panel.model.index(0, COLUMNS.index("title")), "Train speed")  # not saved yet
    assert panel.waiting == ("rename", sid) and title_cell(panel) == TRAIN
    assert not any(button.isEnabled() for button in panel.buttons.values())
    assert "waiting up to 1 s" in panel.message.text() and not panel.message.isHidden()
    qtbot.waitUntil(lambda: bool(warned), timeout=5000)
    ((title, text, ticked),) = warned
    assert ticked >= 5  # the event loop turned while the rename waited a second for the lock
    assert title == "Could not rename the session" and text.startswith("The session database")
    assert "is busy" in text and "try again" in text and text.endswith("The title stays “How fast is the train?”.")
    assert title_cell(panel) == TRAIN and panel.waiting is None and panel.message.isHidden()
    assert all(button.isEnabled() for button in panel.buttons.values())  # the row is still selected
    other.rollback()
    assert store.get_session(sid)["title"] == TRAIN


def test_a_rename_lands_once_the_other_process_lets_go_and_the_list_reads_meanwhile(qtbot, store, other,
                                                                                   warned) -> None:
    sid = record(store, TRAIN)
    panel = panel_over(qtbot, store)
    lock(other)
    with qtbot.waitSignal(panel.session_renamed, timeout=5000) as renamed:
        panel.model.setData(panel.model.index(0, COLUMNS.index("title")), "Train speed")
        panel.refresh()  # reading the store does not wait for the rename's lock
        assert title_cell(panel) == TRAIN and panel.waiting == ("rename", sid)
        QTimer.singleShot(200, other.rollback)
    assert renamed.args == [sid, "Train speed"] and title_cell(panel) == "Train speed"
    assert store.get_session(sid)["title"] == "Train speed" and warned == [] and panel.waiting is None


def test_a_delete_waits_for_the_lock_refusing_other_actions_meanwhile(qtbot, store, other, warned,
                                                                      monkeypatch) -> None:
    monkeypatch.setattr(QMessageBox, "question", lambda *a: QMessageBox.StandardButton.Yes)
    kept, sid = record(store, "Why is the sky blue?"), record(store, TRAIN)
    panel = panel_over(qtbot, store)
    lock(other)
    panel.select(sid)
    opened: list[int] = []
    panel.open_requested.connect(opened.append)
    with qtbot.waitSignal(panel.session_deleted, timeout=5000) as deleted:
        panel.delete_selected()
        assert panel.waiting == ("delete", sid) and panel.model.row_of(sid) is not None
        panel.rename_selected()  # the keys and the menu are refused while it waits, with a word
        panel.buttons["open"].click()
        assert "Still waiting for the session database to delete session" in panel.message.text()
        QTimer.singleShot(200, other.rollback)
    assert deleted.args == [sid] and opened == [] and warned == []
    assert panel.model.row_of(sid) is None and [s["id"] for s in store.list_sessions()] == [kept]


def test_a_delete_that_stays_locked_deletes_nothing_and_says_why(qtbot, store, other, warned, monkeypatch) -> None:
    monkeypatch.setattr(QMessageBox, "question", lambda *a: QMessageBox.StandardButton.Yes)
    sid = record(store, TRAIN)
    panel = panel_over(qtbot, store)
    lock(other)
    panel.select(sid)
    panel.delete_selected()
    qtbot.waitUntil(lambda: bool(warned), timeout=5000)
    (title, text, ticked), = warned
    assert title == "Could not delete the session" and "is busy" in text and "nothing was changed" in text
    assert ticked >= 5 and panel.model.row_of(sid) == 0
    other.rollback()
    assert store.get_session(sid)


def test_no_follow_up_of_a_session_whose_delete_waits(qtbot, keep_window, store, other, warned, tmp_path,
                                                     monkeypatch) -> None:
    """The follow-up's new turn, recorded after the delete landed, would have nothing to follow and be lost."""
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(QMessageBox, "question", lambda *a: QMessageBox.StandardButton.Yes)
    first = record(store, TRAIN)
    bridge = SearchBridge(loader=CountingLoader(), store_factory=lambda: SessionStore(store.path))
    window = keep_window(MainWindow(bridge, store=store, dialogs=False,
                                    settings=QSettings(str(tmp_path / "b.ini"), QSettings.Format.IniFormat)))
    window.open_session(first)
    window.sessions.refresh()
    window.sessions.select(first)
    lock(other)
    with qtbot.waitSignal(window.sessions.session_deleted, timeout=5000):
        window.sessions.delete_selected()
        window.talk.ask("And in miles?")
        assert not window.running and "is being deleted" in window.statusBar().currentMessage()
        QTimer.singleShot(200, other.rollback)
    assert window.current_session is None and store.list_sessions() == [] and warned == []
