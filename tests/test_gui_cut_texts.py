"""What a visual check of the window found: the exit's figures cut mid-word in Node details and missing
from the status bar at 1400 px, the plan bar's advice in the command line's words, a calibrate command broken across
lines, and a PRM's name cut in the Verifier picker with no mark."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings
from PySide6.QtGui import Qt as GuiQt
from PySide6.QtGui import QTextDocument, QTextOption
from PySide6.QtWidgets import QApplication, QFormLayout

from app.eval_exit import ExitTally
from app.gui import plan_bar
from app.gui.bridge import SearchBridge
from app.gui.controls import SearchControls
from app.gui.main_window import MainWindow
from app.gui.terms import commands_html
from app.gui.verifier_picker import VerifierPicker
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.errors import BeamwiseError
from tests.test_gui_bridge import CountingLoader

COMMAND = "beamwise eval PROBLEMS --calibrate"
UNBROKEN = "<nobr>beamwise eval PROBLEMS \u2011\u2011calibrate</nobr>"  # spaces kept, hyphens non-breaking


def run_with_exit(question, _loaded, search, cache, *, should_stop):
    """The fake search, its steps' verifier passes stopped by the entropy exit at layer 6 of 6 (nothing saved): the
    longest figures the self-judge on tiny-qwen2 showed."""
    for event in fake_run(question, search, cache, should_stop=should_stop):
        if isinstance(event, ev.StepSelected):
            event = dataclasses.replace(event, exit_layer=6.0, verifier_layers=6, verifier_layer_tokens=96,
                                        verifier_layer_tokens_full=96)
        yield event


@pytest.fixture
def window(keep_window, tmp_path: Path) -> MainWindow:
    store = SessionStore(tmp_path / "sessions.db")
    settings = QSettings(str(tmp_path / "beamwise.ini"), QSettings.Format.IniFormat)
    bridge = SearchBridge(loader=CountingLoader(), run=run_with_exit)
    return keep_window(MainWindow(bridge, settings=settings, store=store, dialogs=False))


def run_at(qtbot, window: MainWindow, width: int, height: int) -> None:
    window.show()
    window.resize(width, height)
    window.controls.set_configs(ModelSpec(source="synthetic:fake"), SearchConfig(beams=2, width=2, max_steps=3),
                                CacheConfig())
    window.question.setPlainText("What is 12*7?")
    with qtbot.waitSignal(window.run_ended, timeout=5000):
        assert window.start_run()
    for _ in range(3):
        QApplication.processEvents()


def test_the_exit_tally_says_its_figures_in_a_few_words():
    assert ExitTally(1, 6.0, 6, 96, 96).text() == "layer 6 of 6 · 0% saved"  # no '.0' on a whole mean
    assert ExitTally(2, 5.0, 30, 27, 100).text() == "layer 2.5 of 30 · 73% saved"
    assert ExitTally(1, 2.0, 6).text() == "layer 2 of 6" and ExitTally().text() == ""


@pytest.mark.parametrize("size", [(1400, 900), (1920, 1080)])
def test_node_details_show_the_exit_whole_beside_its_label_and_the_sentence_in_the_tooltip(window, qtbot, size):
    """'layer 6.0 of 6, 0% of the verifier's layer work sa' was cut at every size and stacked the whole form."""
    run_at(qtbot, window, *size)
    details = window.panels.details
    details.show_node(window.session.tree.chosen_path[-1])
    QApplication.processEvents()
    label = details.values["verifier_exit"]
    assert label.text() == "layer 6 of 6 · 0% saved"
    assert label.fontMetrics().horizontalAdvance(label.text()) <= label.contentsRect().width(), (label.width(),)
    assert details.form.rowWrapPolicy() == QFormLayout.RowWrapPolicy.DontWrapRows  # side by side on the dock
    assert "stopped this step's candidates at layer 6 of 6, saving 0% of its layer work" in label.toolTip()


def test_the_exit_tooltip_keeps_the_calibrate_command_on_one_line(window, qtbot, monkeypatch):
    from app.gui import details as details_module

    monkeypatch.setattr(details_module, "earliest_exit_note", lambda layer, layers: "it stopped at layer 1")
    run_at(qtbot, window, 1400, 900)
    details = window.panels.details
    details.show_node(window.session.tree.chosen_path[-1])
    label = details.values["verifier_exit"]
    assert label.text().startswith("⚠ layer 6 of 6")
    tip = label.toolTip()
    assert GuiQt.mightBeRichText(tip) and UNBROKEN in tip and "in a terminal" in tip


def test_the_status_bar_shows_the_exit_at_the_default_1400_px(window, qtbot):
    """Ranked below 'idle 0 slots', the exit was dropped at 1400 px and shown only at 1920."""
    run_at(qtbot, window, 1400, 900)
    status = window.status
    assert status.exit.text() == "exit: layer 6 of 6 · 0% saved"
    assert status.exit in status.shown_fields(), [f.text() for f in status.shown_fields()]


def test_the_plan_bar_says_its_advice_in_the_windows_words(monkeypatch):
    """'Point --verifier-model to a Qwen2.5-Math-PRM' while the Transcript said 'Point the Verifier's PRM folder'."""

    class Refused(BeamwiseError):
        def user_message(self) -> str:
            return "the PRM folder /x does not exist. Point --verifier-model to a Qwen2.5-Math-PRM."

    def refuse(*_args, **_kwargs):
        raise Refused("no")

    monkeypatch.setattr(plan_bar, "engine_modules", lambda: None)
    monkeypatch.setattr("app.planner.plan", refuse)
    plan, said = plan_bar._plan((ModelSpec(), SearchConfig(), CacheConfig()), "q", ())
    assert plan is None
    assert said == "No plan: the PRM folder /x does not exist. Point the Verifier's PRM folder to a Qwen2.5-Math-PRM."


def test_the_thresholds_note_says_the_command_in_words_and_never_breaks_it(qtbot, tmp_path, monkeypatch):
    """'(not calibrated: beamwise eval --calibrate)' wrapped as 'beamwise eval --' / 'calibrate)'."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))  # nothing calibrated
    controls = SearchControls()
    qtbot.addWidget(controls)
    controls.set_configs(ModelSpec(), SearchConfig(verifier="self-judge"), CacheConfig())
    shown = controls.thresholds_label.text()
    assert f"not calibrated: run {UNBROKEN} in a terminal" in shown
    note = QTextDocument()
    wrap = QTextOption()
    wrap.setWrapMode(QTextOption.WrapMode.WordWrap)  # as a word-wrapped QLabel lays out rich text
    note.setDefaultTextOption(wrap)
    note.setDefaultFont(controls.thresholds_label.font())
    note.setHtml(shown)
    note.setTextWidth(200)  # 'beamwise eval PROBLEMS --' / 'calibrate' here with plain spaces and hyphens
    note.size()  # lays it out
    lines = []
    block = note.begin()
    while block.isValid():
        layout = block.layout()
        lines += [block.text()[line.textStart(): line.textStart() + line.textLength()]
                  for line in (layout.lineAt(i) for i in range(layout.lineCount()))]
        block = block.next()
    assert any(COMMAND in line.replace("\xa0", " ").replace("\u2011", "-") for line in lines), lines


def test_commands_html_escapes_the_rest_and_keeps_each_command_whole():
    said = commands_html("a <b> & c\nrun `beamwise eval --calibrate` again")
    assert said == "a &lt;b&gt; &amp; c<br>run <nobr>beamwise eval \u2011\u2011calibrate</nobr> again"


@pytest.mark.parametrize("width", [180, 260])
def test_the_verifier_picker_cuts_a_prm_name_in_the_middle_with_a_mark_and_tooltips_it_whole(qtbot, width):
    """'PRM synthetic:tiny-qwen-prm (Qwen2.5-Math-PF' was cut at its end with no '…'."""
    picker = VerifierPicker()
    qtbot.addWidget(picker)
    picker.set_choice("prm", "synthetic:tiny-qwen-prm")
    picker.resize(width, picker.sizeHint().height())
    picker.show()
    QApplication.processEvents()
    whole, shown = picker.currentText(), picker.shown_text()
    assert whole.startswith("PRM synthetic:tiny-qwen-prm (") and shown != whole and "…" in shown
    assert shown.startswith("PRM ") and shown.endswith(")")  # cut in the middle: kind and end both seen
    assert whole in picker.toolTip()
    picker.resize(900, picker.height())
    QApplication.processEvents()
    assert picker.shown_text() == whole and whole not in picker.toolTip()  # whole on the box: the tooltip as it was
