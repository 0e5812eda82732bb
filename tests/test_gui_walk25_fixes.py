"""The window, as a walkthrough found it (session 25): a plan of other settings shown through a run, a failed
export under an earlier success, Ctrl+E exporting a session not shown, a blank title refused unsaid, an idle
download bar that read as an empty text box, and window settings that BEAMWISE_CONFIG_DIR did not move."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from app.gui import plan_bar
from app.gui.plan_bar import PlanBar
from app.store import SessionStore
from engine.config import CacheConfig, ModelSpec, SearchConfig
from tests.test_gui_conversation import FIRST, _record

CONFIGS = (ModelSpec("synthetic:tiny-llama"), SearchConfig(beams=2, width=2, max_steps=2, step_tokens=8),
           CacheConfig(device="cpu"))


def test_a_run_started_before_the_plan_caught_up_does_not_show_the_older_settings_plan(qtbot) -> None:
    """Kept beams typed and Ctrl+Enter at once: "8 candidates will move ..." stayed over a 48-candidate run."""
    configs = [CONFIGS]
    bar = PlanBar(lambda: configs[0], lambda: ("", ()))
    qtbot.addWidget(bar)
    with qtbot.waitSignal(bar.planned, timeout=10_000):
        bar.refresh_now()
    assert " 4 candidates" in bar.sentence.text()
    configs[0] = (CONFIGS[0], SearchConfig(beams=12, width=4, max_steps=2, step_tokens=8), CONFIGS[2])
    bar.schedule()
    bar.set_paused(True)  # the run starts within the debounce
    assert bar.sentence.text() == plan_bar.UNPLANNED_RUN
    with qtbot.waitSignal(bar.planned, timeout=10_000):
        bar.set_paused(False)
    assert "48 candidates" in bar.sentence.text()


def test_a_failed_export_replaces_the_success_said_before(qtbot, tmp_path: Path, make_window, warnings,
                                                         monkeypatch) -> None:
    store = SessionStore(tmp_path / "s.db")
    window = make_window(store=store)
    window.open_session(_record(store, FIRST))
    targets = iter([str(tmp_path / "ok.md"), str(tmp_path / "missing" / "x.md")])
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a: (next(targets), "Markdown (*.md)"))
    window.export_current()
    assert window.statusBar().currentMessage().startswith("Exported session")
    window.export_current()
    said = window.statusBar().currentMessage()
    assert said.startswith("Could not export session") and "does not exist" in said, said
    assert warnings and warnings[-1][0] == "Could not export the session"


def test_ctrl_e_after_new_conversation_exports_nothing_hidden(qtbot, tmp_path: Path, make_window,
                                                             monkeypatch) -> None:
    store = SessionStore(tmp_path / "s.db")
    window = make_window(store=store)
    window.dialogs = False  # the error is read from its signal, not a modal box
    window.show()
    session = _record(store, FIRST)
    window.sessions.refresh()
    window.docks["sessions"].raise_()
    assert window.sessions.select(session)
    window.docks["settings"].raise_()  # the Sessions tab behind another, its row still selected
    window.talk.new_conversation()
    asked: list[str] = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a: asked.append(a[2]) or ("", ""))
    errors: list[tuple[str, str]] = []
    window.error_reported.connect(lambda title, text: errors.append((title, text)))
    window.export_current()
    assert asked == [] and errors == [("Nothing to export", "Run a search or open a session first.")]
    window.docks["sessions"].raise_()  # in view, its selected row is what Export takes
    qtbot.waitUntil(window.sessions.isVisible, timeout=2000)
    window.export_current()
    assert asked and asked[0].endswith(".md")


def test_a_blank_title_is_refused_in_the_cli_s_words(qtbot, tmp_path: Path, make_window, warnings) -> None:
    store = SessionStore(tmp_path / "s.db")
    window = make_window(store=store)
    _record(store, FIRST)
    window.sessions.refresh()
    model = window.sessions.model
    assert model.setData(model.index(0, 0), "   ", Qt.ItemDataRole.EditRole) is False
    assert warnings == [("Could not rename the session",
                         f"A session title must contain some text. The title stays “{FIRST}”.")]
    assert store.get_session(model.session_id(0))["title"] == FIRST


def test_the_download_bar_shows_only_while_a_download_runs(qtbot, scratch_models) -> None:
    """Idle, the bar was an empty white field left of Pull that read as a text box."""
    from app.gui.models_page import ModelsPage
    from tests.hub_server import REPO, Hub

    page = ModelsPage()
    qtbot.addWidget(page)
    page.resize(900, 600)
    page.show()
    assert not page.progress.isVisible()
    shown_while_pulling: list[bool] = []
    page.progress.valueChanged.connect(lambda _value: shown_while_pulling.append(page.progress.isVisible()))
    with Hub(REPO) as hub:
        page.repo_edit.setText("tiny/llama")
        page.endpoint_edit.setText(hub.endpoint)
        with qtbot.waitSignal(page.pull_ended, timeout=30_000) as ended:
            assert page.start_pull()
            assert page.progress.isVisible()
    assert ended.args == ["finished"] and shown_while_pulling and all(shown_while_pulling)
    assert not page.progress.isVisible() and "Downloaded to" in page.pull_status.text()
    assert page.pull_button.isVisible() and page.pull_button.width() < 200  # not stretched across the row


def test_beamwise_config_dir_holds_the_window_s_settings_too(tmp_path: Path, monkeypatch) -> None:
    """It moved early_exit.json but the window's settings stayed in ~/.config/Beamwise/Beamwise.conf."""
    from app.early_exit import thresholds_path
    from app.gui import settings as saved

    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    settings = saved.default_settings()
    assert Path(settings.fileName()) == tmp_path / "config" / "window.ini"  # before writing: never the user's file
    assert thresholds_path().parent == tmp_path / "config"
    saved.save_question(settings, "Why is the sky blue?")
    settings.sync()
    assert "Why is the sky blue?" in (tmp_path / "config" / "window.ini").read_text(encoding="utf-8")
    assert saved.load_question(saved.default_settings()) == "Why is the sky blue?"


def test_without_beamwise_config_dir_the_window_s_settings_stay_where_they_were(monkeypatch) -> None:
    from PySide6.QtCore import QSettings

    from app.gui import settings as saved

    monkeypatch.delenv("BEAMWISE_CONFIG_DIR", raising=False)
    assert saved.default_settings().fileName() == QSettings(saved.ORGANIZATION, saved.APPLICATION).fileName()
