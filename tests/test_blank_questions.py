"""A question or a session title of format characters alone (zero-width spaces and joiners, a BOM) shows nothing: it
is refused as empty, as spaces alone are, by `beamwise run`, `sessions rename` and the window alike."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.gui.conversation import FollowUpBox
from app.gui.sessions_panel import COLUMNS, SessionsPanel
from app.options import UsageError
from app.question import read_question
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine.blank_text import is_blank
from engine.config import SearchConfig
from tests.test_gui_window import small

INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", " \u200b\n\ufeff\u2060 ", "\xa0\u200b"]
SHOWN = ["a\u200b", "\u200bWhat is 2+3?", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\u200f?"]


@pytest.mark.parametrize("text", INVISIBLE)
def test_format_characters_alone_are_blank(text: str) -> None:
    assert is_blank(text)


@pytest.mark.parametrize("text", SHOWN)
def test_text_with_a_visible_letter_is_not_blank_and_keeps_its_joiners(text: str) -> None:
    assert not is_blank(text)


@pytest.mark.parametrize("text", INVISIBLE)
def test_run_refuses_an_invisible_question_as_empty(tmp_path, text: str) -> None:
    with pytest.raises(UsageError, match="the question is empty"):
        read_question(text, None)
    file = tmp_path / "q.txt"
    file.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match="is empty"):
        read_question(None, str(file))


def test_run_keeps_a_question_with_a_zero_width_character_in_it_as_written() -> None:
    assert read_question("\u200bWhat is 2+3?", None) == "\u200bWhat is 2+3?"


@pytest.fixture
def store() -> SessionStore:
    store = SessionStore(memory=True)
    recorder = SessionRecorder(store)
    for event in fake_run("How fast is the train?", SearchConfig(beams=2, width=2, max_steps=2)):
        recorder.write(event)
    return store


@pytest.mark.parametrize("title", INVISIBLE)
def test_rename_refuses_an_invisible_title(store: SessionStore, title: str) -> None:
    """`sessions rename 1 $'\\u200b'` said "session 1 is now '\\u200b'"."""
    with pytest.raises(ValueError, match="must contain some text"):
        store.rename(1, title)
    assert store.get_session(1)["title"] == "How fast is the train?"


def test_sessions_rename_says_so_and_keeps_the_title(tmp_path, capsys) -> None:
    from app.cli import main

    db = tmp_path / "s.db"
    store = SessionStore(db)
    recorder = SessionRecorder(store)
    for event in fake_run("How fast is the train?", SearchConfig(beams=2, width=2, max_steps=2)):
        recorder.write(event)
    store.close()
    assert main(["sessions", "rename", "1", "\u200b", "--db", str(db)]) == 2
    assert "must contain some text" in capsys.readouterr().err
    assert SessionStore(db).get_session(1)["title"] == "How fast is the train?"


def test_the_sessions_tab_refuses_an_invisible_title(qtbot, store: SessionStore, warnings) -> None:
    panel = SessionsPanel(store)
    qtbot.addWidget(panel)
    assert not panel.model.setData(panel.model.index(0, COLUMNS.index("title")), "\u200b\ufeff")
    assert store.get_session(1)["title"] == "How fast is the train?"
    assert warnings and "must contain some text" in warnings[0][1]  # in the words `sessions rename` uses


def test_the_windows_question_box_does_not_run_an_invisible_question(qtbot, make_window) -> None:
    window = make_window()
    small(window)
    window.question.setPlainText("\u200b\u200d")
    assert not window.run_action.isEnabled()
    assert not window.start_run()
    assert "Type a question" in window.statusBar().currentMessage()


def test_the_follow_up_box_does_not_ask_an_invisible_question(qtbot) -> None:
    box = FollowUpBox()
    qtbot.addWidget(box)
    asked: list[str] = []
    box.asked.connect(asked.append)
    box.field.setText("\u200b")
    box.submit()
    box.field.setText("And in miles?")
    box.submit()
    assert asked == ["And in miles?"]
