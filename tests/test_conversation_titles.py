"""A conversation's title is its first turn's: the Sessions tab lists it whatever the later turns are called,
its Rename renames that turn, and `beamwise sessions rename 1` (turn 1) shows there. Before, the tab took the
newest turn's row and title: a follow-up ("One more") replaced a title renamed in the window, and a CLI rename of
turn 1 never showed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QFileDialog

from app.cli import main
from app.conversations import conversation_title, list_conversations
from app.gui.sessions_panel import COLUMNS, SessionsPanel, delete_question
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine.config import SearchConfig


def record(store: SessionStore, question: str, previous: int | None = None) -> int:
    recorder = SessionRecorder(store, previous=previous)
    for event in fake_run(question, SearchConfig(beams=2, width=2, max_steps=2)):
        recorder.write(event)
    assert recorder.session_id is not None
    return recorder.session_id


@pytest.fixture
def talk() -> tuple[SessionStore, list[int]]:
    """A store holding one conversation of three turns."""
    store = SessionStore(memory=True)
    first = record(store, "What is 2+3?")
    second = record(store, "And times 4?", previous=first)
    return store, [first, second, record(store, "Halve it.", previous=second)]


def title_cell(panel: SessionsPanel, row: int = 0) -> str:
    return panel.model.data(panel.model.index(row, COLUMNS.index("title")))


def test_the_listed_title_is_the_first_turns_whatever_the_newest_is_called(talk) -> None:
    store, (first, _, newest) = talk
    store.rename(newest, "My arithmetic chat")  # `sessions rename 3`: the newest turn's own title
    (row,) = list_conversations(store)
    assert (row["id"], row["turns"], row["title"]) == (newest, 3, "What is 2+3?")  # the other columns: the newest's
    store.rename(first, "Arithmetic chat")  # `sessions rename 1`: the conversation's title
    assert [r["title"] for r in list_conversations(store)] == ["Arithmetic chat"]
    assert [r["id"] for r in list_conversations(store, "Arithmetic chat")] == [newest]  # searched too
    assert conversation_title(store, newest) == conversation_title(store, first) == "Arithmetic chat"


def test_a_rename_in_the_window_renames_the_conversation_and_outlives_a_follow_up(qtbot, talk) -> None:
    store, (first, _, newest) = talk
    panel = SessionsPanel(store)
    qtbot.addWidget(panel)
    assert title_cell(panel) == "What is 2+3?" and panel.model.session_id(0) == newest
    with qtbot.waitSignal(panel.session_renamed) as renamed:
        assert panel.model.setData(panel.model.index(0, COLUMNS.index("title")), "My arithmetic chat")
    assert renamed.args == [first, "My arithmetic chat"]
    assert store.get_session(first)["title"] == "My arithmetic chat"
    assert store.get_session(newest)["title"] == "Halve it."  # the turn keeps its own title
    record(store, "One more", previous=newest)  # `run --session 3 "One more"`
    panel.refresh()
    assert title_cell(panel) == "My arithmetic chat" and panel.model.rows[0]["turns"] == 4


def test_a_cli_rename_of_turn_1_shows_in_the_tab_and_of_a_later_turn_says_where_the_title_is(
        qtbot, tmp_path: Path, capsys) -> None:
    db = tmp_path / "r.db"
    with SessionStore(db) as store:
        first = record(store, "What is 2+3?")
        second = record(store, "And times 4?", previous=first)
    assert main(["sessions", "rename", str(first), "Arithmetic chat", "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    assert out == f"session {first} is now 'Arithmetic chat'\n" and err == ""
    assert main(["sessions", "rename", str(second), "Times four", "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    assert out == f"session {second} is now 'Times four'\n"  # renamed as given: `sessions list` rows are turns
    assert f"turn 2 of conversation #{first}" in err and f"beamwise sessions rename {first} --db {db}" in err
    with SessionStore(db) as store:
        panel = SessionsPanel(store)
        qtbot.addWidget(panel)
        assert title_cell(panel) == "Arithmetic chat"
        assert store.get_session(second)["title"] == "Times four"


def test_the_delete_question_and_the_export_name_use_the_conversations_title(qtbot, talk, monkeypatch) -> None:
    store, (first, second, newest) = talk
    store.rename(first, "Arithmetic chat")
    store.rename(newest, "Halving")
    panel = SessionsPanel(store)
    qtbot.addWidget(panel)
    assert delete_question(panel.model.rows[0]).startswith("Delete turn 3 of the conversation “Arithmetic chat”")
    suggested: list[str] = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        lambda _parent, _caption, name, _filters: (suggested.append(name), ("", ""))[1])
    panel.export_with_dialog(newest)  # the listed row
    panel.export_with_dialog(second)  # an earlier turn, not listed: the store's
    assert suggested == ["Arithmetic chat.md", "Arithmetic chat.md"]
