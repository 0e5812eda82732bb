"""The window's export (File > Export, the Sessions tab's Export…): the file name it suggests and the file it
writes; the dialog itself is replaced, as in tests/test_sessions_panel.py."""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QFileDialog, QMessageBox

from app.export import default_file_stem
from app.gui.sessions_panel import SessionsPanel
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine.config import SearchConfig

WINDOWS_FORBIDDEN = re.compile(r'[<>:"/\\|?*\x00-\x1f]')
PORTS = (f"{device}{n}" for device in ("COM", "LPT") for n in "0123456789¹²³")
DEVICES = {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", *PORTS}


def windows_takes(name: str) -> bool:
    """Whether Windows can create a file of this name (its naming rules, as Microsoft documents them)."""
    return (bool(name) and not WINDOWS_FORBIDDEN.search(name) and name[-1] not in ". "
            and name.split(".")[0].rstrip(" ").upper() not in DEVICES and len(name) < 255)


@pytest.mark.parametrize("title", ["con", "NUL", "Com1", "lpt¹", "aux ", "CONOUT$", 'What: "a" <b> | c? *d*. ',
                                   "...", "", "  trailing dot.", "Überlegung — 漢字 ✓", "x" * 300, "conference"])
def test_the_suggested_name_is_one_windows_takes(title: str) -> None:
    """'con' gave con.md, which Windows opens as the console, whatever the suffix."""
    name = f"{default_file_stem(title)}.md"
    assert windows_takes(name), name
    assert len(name) <= 63


def test_conference_and_a_plain_title_keep_their_words() -> None:
    assert default_file_stem("conference") == "conference" and default_file_stem("Überlegung 漢字") == "Überlegung 漢字"
    assert default_file_stem("con") == "con_" and default_file_stem("") == "session"


@pytest.fixture
def panel(qtbot) -> SessionsPanel:
    store = SessionStore(memory=True)
    recorder = SessionRecorder(store)
    for event in fake_run("nul", SearchConfig(beams=2, width=2, max_steps=2)):
        recorder.write(event)
    widget = SessionsPanel(store)
    qtbot.addWidget(widget)
    return widget


def test_the_dialog_is_offered_a_name_windows_takes(panel: SessionsPanel, monkeypatch: pytest.MonkeyPatch) -> None:
    offered = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda parent, caption, name, filters: offered.append(name)
                        or ("", ""))
    panel.export_with_dialog(panel.model.session_id(0))
    assert offered == ["nul_.md"]


def test_a_suffix_added_after_the_dialog_asks_before_replacing(panel: SessionsPanel, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Typed 'notes' with the Markdown filter: the dialog checked 'notes', and notes.md was replaced unasked."""
    (tmp_path / "notes.md").write_text("my own notes", encoding="utf-8")
    asked: list[str] = []
    answer = {"button": QMessageBox.StandardButton.No}
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a: (str(tmp_path / "notes"), "Markdown (*.md)"))
    monkeypatch.setattr(QMessageBox, "question", lambda parent, title, text, *a: asked.append(text) or answer["button"])
    sid = panel.model.session_id(0)
    assert panel.export_with_dialog(sid) is None
    assert (tmp_path / "notes.md").read_text(encoding="utf-8") == "my own notes"
    assert asked == ["notes.md already exists.\n\nReplace it?"]
    answer["button"] = QMessageBox.StandardButton.Yes
    assert panel.export_with_dialog(sid) == tmp_path / "notes.md"
    assert (tmp_path / "notes.md").read_text(encoding="utf-8").startswith("# nul")
    (tmp_path / "notes.md").unlink()
    assert panel.export_with_dialog(sid) == tmp_path / "notes.md" and len(asked) == 2  # nothing there: not asked


def test_a_folder_name_with_other_scripts_is_written(panel: SessionsPanel, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "Документы 文書 مستندات"
    folder.mkdir()
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a: (str(folder / "Überlegung ✓.html"), ""))
    written = panel.export_with_dialog(panel.model.session_id(0))
    assert written == folder / "Überlegung ✓.html" and written.read_text(encoding="utf-8").startswith("<!DOCTYPE")


@pytest.mark.parametrize(("title", "stem"), [
    ("Un cafe\u0301 noir", "Un café noir"),  # an accent written apart was a '_' beside its letter
    ("नमस्ते दुनिया", "नमस्ते दुनिया"),  # Devanagari's vowel signs and viramas are marks, not letters
    ("Wie viele Äpfel?", "Wie viele Äpfel"), ("苹果有多少个？", "苹果有多少个"), ("שלום עולם", "שלום עולם"),
    ("🍎🍎 apples 👨\u200d👩\u200d👧", "apples"),  # a run of emoji and joiners is one '_', none at the ends
    ("photo\u202egpj.exe", "photo_gpj_exe"),  # a direction override cannot make the name read backwards
])
def test_the_suggested_name_keeps_every_scripts_letters(title: str, stem: str) -> None:
    assert default_file_stem(title) == stem


@pytest.mark.parametrize("title", ["𝐇𝐞𝐥𝐥𝐨 " * 20, "e\u0301" * 70, "ΣΟΦΙΑ" * 40, "क्षत्रिय" * 20, "漢字" * 50])
def test_a_long_title_is_cut_between_letters_and_within_the_bytes_a_name_holds(title: str) -> None:
    stem = default_file_stem(title)
    assert len(stem) <= 60 and len(stem.encode("utf-8")) <= 120
    assert not unicodedata.category(stem[-1]).startswith("M") and unicodedata.normalize("NFC", title).startswith(stem)
