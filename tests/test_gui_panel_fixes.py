"""The Sessions and Models panels say what `beamwise sessions` and `beamwise models list` say: an unfinished download,
a damaged list of added folders, a search without a match, what Delete removes of a conversation; messages that fit
the default window; View's panel keys that stay put without a session database; model text without control bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QMessageBox

from app import model_library as lib
from app.gui.bridge import SearchBridge
from app.gui.main_window import MainWindow
from app.gui.models_page import ModelsPage
from app.gui.sessions_panel import SessionsPanel
from app.gui.sessions_table import COLUMNS
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine.config import SearchConfig
from tests.hub_server import CONFIG

SEARCH = SearchConfig(beams=2, width=2, max_steps=3)


# ---------------------------------------------------------------- Models


@pytest.fixture
def models_page(qtbot, scratch_models) -> ModelsPage:
    """A page over an empty models folder; `page.refresh()` lists what the test put there."""
    page = ModelsPage(confirm=lambda title, text: False)
    qtbot.addWidget(page)
    return page


def refreshed(qtbot, page: ModelsPage) -> None:
    """`page.refresh()`, waited for: the list is read off the GUI thread."""
    page.refresh()
    qtbot.waitUntil(lambda: not page.listing, timeout=30000)


def name_cells(page: ModelsPage) -> list[str]:
    model = page.table_model
    return [model.data(model.index(row, 0)) for row in range(model.rowCount())]


def test_an_unfinished_download_says_so_in_its_row_and_cannot_be_used(models_page, qtbot):
    folder = lib.models_dir() / "tiny--llama"
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes(CONFIG)
    marker = {"repo": "tiny/llama", "endpoint": "https://huggingface.co", "revision": "main", "file": None,
              "complete": False}  # as a pull writes it (an older release's, naming no file, offers no Pull again)
    (folder / lib.MARKER).write_text(json.dumps(marker), encoding="utf-8")
    refreshed(qtbot, models_page)
    cell = next(name for name in name_cells(models_page) if name.startswith("tiny--llama"))
    assert "did not finish" in cell and "(downloaded)" not in cell
    models_page.select_name("tiny--llama")
    assert models_page.use_button.text() == "Pull again"  # it cannot be used: its button resumes the download
    assert not models_page.problem_label.isHidden()
    assert "did not finish" in models_page.problem_label.text() and "pull it again" in models_page.problem_label.text()
    models_page.select_name("SmolLM2-135M-Instruct")  # a model without a problem: Use on, no problem line
    assert models_page.use_button.isEnabled() and models_page.problem_label.isHidden()


def test_a_damaged_list_of_added_folders_is_a_row_that_says_what_is_wrong(models_page, qtbot):
    lib.added_list_path().parent.mkdir(parents=True, exist_ok=True)
    lib.added_list_path().write_text("{not json", encoding="utf-8")
    refreshed(qtbot, models_page)
    cell = next(name for name in name_cells(models_page) if name.startswith(lib.ADDED))
    assert "cannot be read" in cell
    models_page.select_name(lib.ADDED)
    assert "fix it, or delete it" in models_page.problem_label.text() and not models_page.use_button.isEnabled()


@pytest.fixture
def window(keep_window, tmp_path: Path, scratch_models) -> MainWindow:
    """The window at its default size, the Models tab in front."""
    settings = QSettings(str(tmp_path / "w.ini"), QSettings.Format.IniFormat)
    window = keep_window(MainWindow(SearchBridge(), settings=settings, dialogs=False))
    window.resize(1400, 900)
    window.show()
    window.docks["models"].raise_()
    return window


def test_a_refused_folder_is_said_in_full_beside_add_folder(qtbot, window, tmp_path):
    page = window.models
    page.refresh()
    only_config = tmp_path / "onlycfg"
    only_config.mkdir()
    (only_config / "config.json").write_bytes(CONFIG)
    assert page.add_folder(only_config) is False
    label = page.folder_status
    qtbot.waitUntil(lambda: label.isVisible() and label.height() >= label.heightForWidth(label.width()))
    assert "Could not add" in label.text() and "tokenizer" in label.text()
    assert page.pull_status.text() == ""  # the pull box is about downloads


def test_remove_fits_its_longest_label_at_the_default_size(qtbot, window, tmp_path):
    page = window.models
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.json").write_bytes(CONFIG)
    lib.write_added([folder.resolve()])
    refreshed(qtbot, page)
    qtbot.waitUntil(lambda: page.remove_button.isVisible())
    page.select_name("mine")
    button = page.remove_button
    assert button.text() == "Remove from list"
    assert button.width() >= button.sizeHint().width()  # at once, not only after the layout catches up


# ---------------------------------------------------------------- View's keys


def test_panel_keys_stay_put_and_ctrl_2_says_why_sessions_are_missing(keep_window, tmp_path):
    window = keep_window(MainWindow(SearchBridge(), settings=QSettings(str(tmp_path / "w.ini"),
                                                                       QSettings.Format.IniFormat), dialogs=False))
    view = next(a.menu() for a in window.menuBar().actions() if a.text() == "&View")
    keys = {action.shortcut().toString(): action for action in view.actions() if not action.isSeparator()}
    assert keys["Ctrl+3"].text() == "&Models" and keys["Ctrl+6"].text() == "Memory and &PCIe"
    keys["Ctrl+2"].trigger()
    said = window.statusBar().currentMessage()
    assert said.startswith("Sessions are not available") and "start Beamwise again" in said


# ---------------------------------------------------------------- Sessions


def record(store: SessionStore, question: str, previous: int | None = None, answer_text: str | None = None) -> int:
    recorder = SessionRecorder(store, previous=previous)
    for event in fake_run(question, SEARCH):
        recorder.write(event)
    session_id = store.list_sessions()[0]["id"]
    if answer_text is not None:
        with store.transaction() as conn:
            conn.execute("UPDATE sessions SET answer = ?, title = ? WHERE id = ?", (answer_text, answer_text,
                                                                                   session_id))
    return session_id


@pytest.fixture
def store() -> SessionStore:
    return SessionStore(memory=True)


def panel_over(qtbot, store: SessionStore) -> SessionsPanel:
    panel = SessionsPanel(store)
    qtbot.addWidget(panel)
    panel.show()
    return panel


def test_deleting_a_conversation_row_asks_about_its_newest_turn_only(qtbot, store, monkeypatch):
    first = record(store, "How fast is the train?")
    record(store, "And in miles?", previous=first)
    panel = panel_over(qtbot, store)
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question", lambda parent, title, text, *a: asked.append(text) or
                        QMessageBox.StandardButton.Yes)
    panel.view.selectRow(0)
    panel.delete_selected()
    assert asked[0].startswith("Delete turn 2 of the conversation") and "Turn 1 stays" in asked[0]
    assert [row["turns"] for row in panel.model.rows] == [1]  # as asked: turn 1 is still listed
    panel.view.selectRow(0)
    panel.delete_selected()
    assert "Delete turn" not in asked[1] and "everything recorded for it" in asked[1]
    assert panel.model.rowCount() == 0


def test_a_search_without_a_match_says_so_and_the_message_goes_with_a_match(qtbot, store):
    record(store, "How fast is the train?")
    panel = panel_over(qtbot, store)
    panel.search.setText("zzz")
    panel.refresh()
    assert panel.model.rowCount() == 0 and not panel.message.isHidden()
    assert "No sessions match “zzz”" in panel.message.text() and "clear the search" in panel.message.text()
    panel.search.setText("train")
    panel.refresh()
    assert panel.model.rowCount() == 1 and panel.message.isHidden()


def test_control_characters_of_a_model_show_as_replacement_marks(qtbot, store):
    record(store, "What is 12 * 7?", answer_text="84\x1b[2J\x1a\x7f\x02 done")
    panel = panel_over(qtbot, store)
    shown = [panel.model.data(panel.model.index(0, COLUMNS.index(column))) for column in ("title", "answer")]
    for text in shown:
        assert text.startswith("84\ufffd") and not any(ch in text for ch in "\x1b\x1a\x7f\x02")
