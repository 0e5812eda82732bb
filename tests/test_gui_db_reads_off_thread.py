"""Two of the window's waits on the session database, said and kept off the GUI thread.

A rename or delete in the Sessions tab read every page of the database (SQLite's quick_check) on the GUI thread: its
second connection to the file checked the pages the window's store had checked when it opened (0.2 s for 315 MB,
seconds from a cold disk). And a server run whose first write waited for another program's lock said "loading the
model" meanwhile: the wait was said only after a local model load."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QMessageBox

import app.store_file
from app.gui.bridge import SearchBridge, database_wait_text, is_database_wait
from app.gui.main_window import MainWindow
from app.gui.sessions_panel import SessionsPanel
from app.gui.sessions_table import COLUMNS
from app.store import SessionStore
from engine import events as ev
from engine.config import CacheConfig, ModelSpec, SearchConfig
from tests.fake_openai import FakeServer
from tests.test_gui_bridge import CountingLoader, run_fake
from tests.test_gui_run_waits_for_db import locked  # noqa: F401 (a fixture)
from tests.test_gui_server import choose_server
from tests.test_gui_session_writes import record

BUSY_S = 3.0  # the store's busy timeout here (5 s in the app)
TRAIN = "How fast is the train?"



@pytest.fixture
def checks(monkeypatch) -> list[str]:
    """The name of the thread of each quick_check (a read of every page of the database) from now on."""
    threads: list[str] = []
    real = app.store_file.quick_check

    def counted(conn: sqlite3.Connection) -> str | None:
        threads.append(threading.current_thread().name)
        return real(conn)

    monkeypatch.setattr(app.store_file, "quick_check", counted)
    return threads


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    """The window's store: its pages read once, as `open_session_store` reads them before the window opens."""
    with SessionStore(tmp_path / "s.db", busy_timeout=BUSY_S) as opened:
        opened.check_pages()
        yield opened


def panel_over(qtbot, store: SessionStore) -> SessionsPanel:
    panel = SessionsPanel(store)
    qtbot.addWidget(panel)
    panel.show()
    return panel


def test_a_rename_reads_no_page_again_on_the_gui_thread(qtbot, store, checks) -> None:
    sid = record(store, TRAIN)
    panel = panel_over(qtbot, store)
    with qtbot.waitSignal(panel.session_renamed, timeout=5000) as renamed:
        panel.model.setData(panel.model.index(0, COLUMNS.index("title")), "Train speed")
    assert renamed.args == [sid, "Train speed"] and store.get_session(sid)["title"] == "Train speed"
    assert checks == []  # before: one quick_check of the whole file, on the GUI thread ("MainThread")


def test_a_delete_that_waits_for_the_lock_reads_no_page_again(qtbot, store, checks, monkeypatch) -> None:
    monkeypatch.setattr(QMessageBox, "question", lambda *a: QMessageBox.StandardButton.Yes)
    sid = record(store, TRAIN)
    panel = panel_over(qtbot, store)
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process writes: the delete waits for it in a worker thread
        panel.select(sid)
        with qtbot.waitSignal(panel.session_deleted, timeout=5000):
            panel.delete_selected()
            assert panel.waiting == ("delete", sid)
            QTimer.singleShot(200, other.rollback)
    finally:
        other.close()
    assert store.list_sessions() == [] and checks == []  # neither the quick store nor the worker's read them again


def test_a_store_told_its_pages_were_read_does_not_read_them_again(store, checks) -> None:
    sid = record(store, TRAIN)
    with SessionStore(store.path, pages_checked=store.pages_checked) as beside:
        beside.rename(sid, "Train speed")
    assert checks == []
    with SessionStore(store.path) as unchecked:  # not told: its first write reads them, as before
        assert not unchecked.pages_checked
        unchecked.rename(sid, "Train speed, again")
        assert unchecked.pages_checked
    assert len(checks) == 1


def test_only_the_bridges_database_wait_is_a_wait() -> None:
    assert is_database_wait(database_wait_text(1.5, 5.0)) and is_database_wait(database_wait_text(0.5, 0.0))
    assert not is_database_wait("Loading synthetic:fake") and not is_database_wait("Asking http://127.0.0.1:1")



def test_a_server_run_says_it_waits_for_the_database_not_for_the_model(qtbot, locked, tmp_path,  # noqa: F811
                                                                      monkeypatch) -> None:
    path, holder = locked
    bridge = SearchBridge(loader=CountingLoader(), run=run_fake,
                          store_factory=lambda: SessionStore(path, busy_timeout=BUSY_S))
    window = MainWindow(bridge, settings=QSettings(str(tmp_path / "b.ini"), QSettings.Format.IniFormat),
                        dialogs=False)
    qtbot.addWidget(window)
    messages: list[str] = []
    waits_said: list[str] = []

    def said(message: str) -> None:
        messages.append(message)
        if is_database_wait(message) and holder.in_transaction:  # what the line says while it waits: let go now
            holder.execute("COMMIT")

    def stage(message: str, _fraction: float) -> None:  # before the fix the line never said it: let go after 2 s
        waits_said.append(message)
        if len(waits_said) >= 4 and holder.in_transaction:
            holder.execute("COMMIT")

    try:
        with FakeServer() as server:
            window.controls.set_configs(ModelSpec(), SearchConfig(beams=2, width=2, max_steps=3), CacheConfig())
            choose_server(window, server.url, monkeypatch, key_from="none")
            window.question.setPlainText("A train travels 60 km in 45 minutes. What is its average speed?")
            window.statusBar().messageChanged.connect(said)
            bridge.load_progress.connect(stage)
            with qtbot.waitSignal(window.run_ended, timeout=20_000) as ended:
                assert window.start_run()
    finally:
        bridge.shutdown()
    assert isinstance(ended.args[0], ev.RunFinished)
    assert waits_said and all(is_database_wait(m) for m in waits_said)  # the bridge said the wait
    waits = [m for m in messages if is_database_wait(m)]
    assert waits and waits[0].endswith("another program holds it locked"), messages  # and the line said it
    assert not [m for m in messages[messages.index(waits[0]):] if m.startswith("loading the model")], messages
    assert window.status.banner.isHidden() and not window.status.live.waiting
    assert window.current_session is not None  # recorded in the database once it was free
