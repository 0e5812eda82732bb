"""The window's export takes a typed file name as `sessions export -o NAME` does: a name with a suffix of its own
is written as typed (gui_export.txt holds Markdown, as `-o s3.txt` does; it was gui_export.txt.md), its format the
one its suffix says, else the chosen filter's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QFileDialog, QMessageBox

from app.cli import main
from app.export import format_of_name
from app.gui.sessions_panel import SessionsPanel
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine.config import SearchConfig

MARKDOWN, WEB_PAGE, JSON = "Markdown (*.md)", "Web page (*.html)", "JSON, can be imported (*.json)"


@pytest.fixture
def panel(qtbot) -> SessionsPanel:
    store = SessionStore(memory=True)
    recorder = SessionRecorder(store)
    for event in fake_run("What is 2+3?", SearchConfig(beams=2, width=2, max_steps=2)):
        recorder.write(event)
    widget = SessionsPanel(store)
    qtbot.addWidget(widget)
    return widget


def kind(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    return "html" if text.startswith("<!DOCTYPE") else "json" if text.startswith("{") else "md"


@pytest.mark.parametrize(("typed", "chosen", "written", "fmt"), [
    ("gui_export.txt", MARKDOWN, "gui_export.txt", "md"),  # was gui_export.txt.md
    ("gui_export.txt", WEB_PAGE, "gui_export.txt", "html"),  # as `-o gui_export.txt --format html`
    ("notes.markdown", WEB_PAGE, "notes.markdown", "md"),  # the suffix says the format, as the CLI reads it
    ("page.HTM", MARKDOWN, "page.HTM", "html"),
    ("notes", JSON, "notes.json", "json"),  # no suffix: the filter's
    ("report 1.5", MARKDOWN, "report 1.5.md", "md"),  # a number's dot starts no suffix
    ("Dr. Who", "", "Dr. Who.md", "md"),
])  # fmt: skip
def test_a_typed_name_is_written_as_the_command_writes_it(panel: SessionsPanel, tmp_path: Path, monkeypatch,
                                                          typed: str, chosen: str, written: str, fmt: str) -> None:
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a: (str(tmp_path / typed), chosen))
    monkeypatch.setattr(QMessageBox, "question", lambda *a: pytest.fail("nothing there: nothing to ask about"))
    assert panel.export_with_dialog(panel.model.session_id(0)) == tmp_path / written
    assert [p.name for p in tmp_path.iterdir()] == [written] and kind(tmp_path / written) == fmt


def test_a_name_with_its_own_suffix_is_not_asked_about_again(panel: SessionsPanel, tmp_path: Path,
                                                             monkeypatch) -> None:
    """The dialog asked about the name typed already: only a suffix added after it is asked about here."""
    (tmp_path / "s3.txt").write_text("mine", encoding="utf-8")
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a: (str(tmp_path / "s3.txt"), MARKDOWN))
    monkeypatch.setattr(QMessageBox, "question", lambda *a: pytest.fail("asked twice"))
    assert panel.export_with_dialog(panel.model.session_id(0)) == tmp_path / "s3.txt"
    assert kind(tmp_path / "s3.txt") == "md" and (tmp_path / "s3.txt").read_text(encoding="utf-8") != "mine"


def test_the_command_and_the_window_write_one_name_alike(panel: SessionsPanel, tmp_path: Path, monkeypatch,
                                                         capsys) -> None:
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    db = tmp_path / "s.db"
    with SessionStore(db) as store, SessionRecorder(store) as recorder:
        for event in fake_run("What is 2+3?", SearchConfig(beams=2, width=2, max_steps=2)):
            recorder.write(event)
    assert main(["sessions", "export", "1", "-o", str(tmp_path / "cli.txt"), "--db", str(db)]) == 0
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a: (str(tmp_path / "gui.txt"), MARKDOWN))
    assert panel.export_with_dialog(panel.model.session_id(0)) == tmp_path / "gui.txt"
    assert kind(tmp_path / "cli.txt") == kind(tmp_path / "gui.txt") == "md"


@pytest.mark.parametrize(("name", "fmt"), [("a.md", "md"), ("a.MarkDown", "md"), ("a.json", "json"),
                                           ("a.htm", "html"), ("a.html", "html"), ("a.txt", None), ("a", None)])
def test_the_format_a_name_says(name: str, fmt: str | None) -> None:
    assert format_of_name(name) == fmt
