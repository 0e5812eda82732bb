"""Opening a session, or Run again, put the session's question into the question box with setPlainText, and a
question the user was typing there was gone for good (its undo history with it). It is now one edit the box
undoes: Ctrl+Z brings the draft back, and the status bar says so."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.store import SessionStore
from tests.test_gui_conversation import FIRST, _record


def undo(qtbot, window) -> None:
    qtbot.keyClick(window.question, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)


def test_opening_a_session_over_a_draft_can_be_undone(qtbot, tmp_path, make_window) -> None:
    store = SessionStore(tmp_path / "s.db")
    window = make_window(store=store)
    window.question.setPlainText("")
    qtbot.keyClicks(window.question, "my unsent draft")
    window.open_session(_record(store, FIRST))
    assert window.question.toPlainText() == FIRST
    assert "Ctrl+Z in the question box brings back what you had typed" in window.statusBar().currentMessage()
    undo(qtbot, window)
    assert window.question.toPlainText() == "my unsent draft"


def test_run_again_over_a_draft_can_be_undone_and_an_empty_box_is_not_mentioned(qtbot, tmp_path,
                                                                                 make_window) -> None:
    store = SessionStore(tmp_path / "s.db")
    window = make_window(store=store)
    session = _record(store, FIRST)
    window.question.setPlainText("")
    window.load_session_settings(session)
    assert window.question.toPlainText() == FIRST
    assert "Ctrl+Z" not in window.statusBar().currentMessage()  # nothing of the user's was replaced
    window.question.setPlainText("")
    qtbot.keyClicks(window.question, "another draft")
    window.load_session_settings(session)
    assert "Ctrl+Z in the question box" in window.statusBar().currentMessage()
    undo(qtbot, window)
    assert window.question.toPlainText() == "another draft"
