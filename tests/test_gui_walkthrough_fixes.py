"""What a walkthrough of the window found: Run again during a run, a window without a session database, a follow-up
that failed on a setting, a draft under a follow-up, Ctrl+1 … Ctrl+6 on panels in view, a close with one invalid
setting, a run refused before it started, `gui --screenshot` of a run that never searched, and Stop's dropped step
left in the tree."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.cli import build_parser
from app.gui import launch
from app.gui import settings as saved
from app.gui.bridge import SearchBridge
from app.gui.conversation import UNSAVED_HINTS, retry_hints
from app.gui.launch import Screenshot, window_store
from app.gui.main_window import MainWindow
from app.recorder import SessionRecorder
from app.session import ROOT_ID
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import CacheConfig, ModelSpec, SearchConfig
from tests.test_gui_bridge import CountingLoader, gated, run_fake

QUESTION, FOLLOW_UP = "How fast is the train?", "And in miles per hour?"
SMALL = SearchConfig(beams=2, width=2, max_steps=3)


def small(window: MainWindow, question: str = QUESTION) -> None:
    window.controls.set_configs(ModelSpec("synthetic:fake"), SMALL, CacheConfig())
    window.question.setPlainText(question)


def run_to_end(qtbot, window: MainWindow, start) -> Any:
    with qtbot.waitSignal(window.run_ended, timeout=10000) as blocker:
        start()
    return blocker.args[0]


@pytest.fixture
def saving_window(keep_window, tmp_path: Path, qsettings):
    """`make(run)`: a window whose runs (`run`, taking `history`) are recorded in a file database."""
    db = tmp_path / "s.db"
    stores: list[SessionStore] = []

    def make(run) -> MainWindow:
        stores.append(SessionStore(db))
        bridge = SearchBridge(loader=CountingLoader(), run=run, store_factory=lambda: SessionStore(db))
        return keep_window(MainWindow(bridge, settings=qsettings, store=stores[-1], dialogs=False))

    yield make
    for store in stores:
        store.close()


def answering(question, loaded, search, cache, *, should_stop, history=()) -> Iterator[Any]:
    return fake_run(question, search, cache, should_stop=should_stop)


# 1 ------------------------------------------------------------------------------------------------------------


def test_run_again_while_a_search_runs_is_refused_as_open_is(qtbot, make_window) -> None:
    """It put the session's question and settings under the running search; the tree then showed a cancelled run
    of one question beside another."""
    store = SessionStore(memory=True)
    recorder = SessionRecorder(store)
    for event in fake_run("Another question?", SearchConfig(beams=4, width=2, max_steps=5)):
        recorder.write(event)
    gate = threading.Event()
    window = make_window(run=gated(gate), store=store)
    small(window)
    window.start_run()
    qtbot.waitUntil(lambda: window.session.tree.last_selected_step >= 1, timeout=5000)
    window.load_session_settings(1)
    assert window.statusBar().currentMessage() == "Stop the running search before running a session again."
    assert window.question.toPlainText() == QUESTION and window.controls.configs()[1].beams == SMALL.beams
    panel = window.sessions
    panel.view.selectRow(0)
    menu = {action.text(): action for action in panel.context_menu().actions()}
    for greyed in (panel.buttons["open"], panel.buttons["run_again"], menu["Open"], menu["Run again"]):
        assert not greyed.isEnabled()  # it looked usable and was refused only once pressed
    assert panel.buttons["export"].isEnabled() and menu["Rename"].isEnabled()
    with qtbot.waitSignal(window.run_ended, timeout=5000):
        gate.set()
    assert panel.buttons["run_again"].isEnabled() and menu["Run again"].isEnabled()
    store.close()


# 2 ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["nofolder/x.db", "notes.txt"])
def test_a_typed_db_that_cannot_be_opened_is_an_error_before_the_window(tmp_path: Path, capsys, where) -> None:
    """It opened the window, ran unsaved and exited 0, where README's table says exit 2."""
    (tmp_path / "notes.txt").write_text("my notes\n")
    args = build_parser().parse_args(["gui", "--db", str(tmp_path / where), "--question", "Hi", "--screenshot",
                                      str(tmp_path / "s.png"), "--model", "synthetic:tiny-llama", "--beams", "1",
                                      "--width", "1", "--max-steps", "1", "--step-tokens", "4"])
    assert launch.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("beamwise: error: ") and str(tmp_path / where) in err
    assert not (tmp_path / "s.png").exists() and not (tmp_path / "nofolder").exists()
    assert (tmp_path / "notes.txt").read_text() == "my notes\n"


@pytest.mark.parametrize("blank", ["", "   "])
def test_an_empty_db_for_the_window_is_refused_as_run_refuses_it(tmp_path: Path, monkeypatch, capsys, blank) -> None:
    """`gui --db ""` opened the default database, and `--db "   "` made a database named by three spaces."""
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["gui", "--db", blank, "--question", "Hi", "--screenshot", "s.png", "--model",
                                      "synthetic:tiny-llama", "--max-steps", "1"])
    assert launch.main(args) == 2
    assert "--db is empty" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_without_the_default_database_the_window_says_follow_ups_need_it(qtbot, keep_window, qsettings, tmp_path,
                                                                          monkeypatch, capsys) -> None:
    """Only stderr said "Sessions will not be saved"; beside the answer the box said "Follow-ups come after an
    answer"."""
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "afile"))
    store, problem = window_store(None, interactive=False)
    assert store is None and "is a file, not a folder" in problem
    assert f"beamwise: Sessions will not be saved: {problem}" in capsys.readouterr().err
    window = keep_window(MainWindow(SearchBridge(loader=CountingLoader(), run=run_fake), settings=qsettings,
                                    store=None, dialogs=False, store_problem=problem))
    small(window)
    assert isinstance(run_to_end(qtbot, window, window.start_run), ev.RunFinished)
    box = window.talk.box.field
    assert not box.isEnabled() and box.placeholderText() in UNSAVED_HINTS
    assert problem in box.toolTip() and "Follow-ups need the session database" in box.toolTip()
    said = window.statusBar().currentMessage()
    assert said.startswith("This answer was not saved, and follow-ups need the session database")
    assert said.endswith(problem)
    run_to_end(qtbot, window, window.start_run)
    assert window.statusBar().currentMessage().startswith("Done: ")  # said once


# 3, 4 ---------------------------------------------------------------------------------------------------------


def failing_when(failing: list[bool], histories: list | None = None):
    """A run that fails on its KV budget while `failing[0]` holds, else answers; `histories` gets each run's."""
    def run(question, loaded, search, cache, *, should_stop, history=()):
        if histories is not None:
            histories.append(tuple(history))
        if not failing[0]:
            return fake_run(question, search, cache, should_stop=should_stop)
        started = next(iter(fake_run(question, search, cache)))
        return iter([started, ev.RunFailed("KVBudgetTooSmall", "KV budget 1 MB is too small. Raise --kv-budget.")])

    return run


def follow_up_failed(qtbot, window, failing: list[bool]):
    """`window` (running `failing_when(failing)`) answers a first question, then FOLLOW_UP typed in the follow-up
    box fails on its setting: (window, the box, the first turn's session, the follow-up's end event)."""
    small(window)
    run_to_end(qtbot, window, window.start_run)
    first = window.current_session
    failing[0] = True
    box = window.talk.box
    box.field.setText(FOLLOW_UP)
    return window, box, first, run_to_end(qtbot, window, box.submit)


def test_a_follow_up_that_failed_on_a_setting_keeps_its_text_and_is_asked_again_after_the_fix(qtbot,
                                                                                             saving_window) -> None:
    """The box was cleared and stayed off ("Follow-ups come after an answer"); the text survived only in the
    question box, where Run started a new conversation without the first turn."""
    failing, histories = [False], []
    window, box, turn_one, failed = follow_up_failed(qtbot, saving_window(failing_when(failing, histories)),
                                                     failing)
    assert isinstance(failed, ev.RunFailed)
    assert box.field.text() == FOLLOW_UP and box.field.isEnabled()
    assert box.field.placeholderText() in retry_hints(2)
    assert window.talk.turns.tabText(1) == "Turn 2 (failed)"
    failing[0] = False  # the KV budget fixed
    assert isinstance(run_to_end(qtbot, window, box.submit), ev.RunFinished)
    turn = window.store.get_session(window.current_session)
    assert (turn["previous_id"], turn["turn"], turn["question"]) == (turn_one, 2, FOLLOW_UP)
    assert histories[-1] == ((QUESTION, window.store.get_session(turn_one)["answer"]),)  # after turn 1 still
    assert box.field.text() == ""  # answered: the box is free again


def test_a_failed_follow_up_kept_in_the_box_goes_with_its_conversation(qtbot, saving_window) -> None:
    """Ctrl+N (or opening another conversation) kept it, and Enter after the next answer asked it there."""
    failing = [False]
    window, box, first, _ = follow_up_failed(qtbot, saving_window(failing_when(failing)), failing)
    assert box.field.text() == FOLLOW_UP
    failing[0] = False
    window.talk.new_conversation()
    assert box.field.text() == ""
    window.open_session(first)
    box.field.setText(FOLLOW_UP)
    small(window, "Another question?")
    run_to_end(qtbot, window, window.start_run)  # Run on a typed question: a new conversation
    assert box.field.text() == ""


def test_a_follow_up_that_finished_with_no_answer_keeps_its_text_to_be_asked_again(qtbot, saving_window) -> None:
    """A chosen path of no text is no answer: the box offers to ask again in that turn's place, and it had cleared
    the text to ask."""
    empty = [False]

    def run(question, loaded, search, cache, *, should_stop, history=()):
        events = fake_run(question, search, cache, should_stop=should_stop)
        return (ev.RunFinished(**{**vars(e), "answer": ""}) if empty[0] and isinstance(e, ev.RunFinished) else e
                for e in events)

    window = saving_window(run)
    small(window)
    run_to_end(qtbot, window, window.start_run)
    empty[0] = True
    box = window.talk.box
    box.field.setText(FOLLOW_UP)
    assert isinstance(run_to_end(qtbot, window, box.submit), ev.RunFinished)
    assert box.field.text() == FOLLOW_UP and box.field.placeholderText() in retry_hints(2)


def test_a_follow_up_leaves_the_draft_in_the_question_box(qtbot, saving_window) -> None:
    """`window.question.setPlainText(follow-up)` replaced the draft there, its undo history too."""
    window = saving_window(answering)
    small(window)
    run_to_end(qtbot, window, window.start_run)
    draft = "My long carefully drafted next question, not yet run"
    window.question.setPlainText(draft)
    window.talk.box.field.setText(FOLLOW_UP)
    run_to_end(qtbot, window, window.talk.box.submit)
    assert window.question.toPlainText() == draft
    turn = window.store.get_session(window.current_session)
    assert (turn["question"], turn["turn"]) == (FOLLOW_UP, 2)
    assert window.session.outline.question == FOLLOW_UP


# 5 ------------------------------------------------------------------------------------------------------------


def press(qtbot, window: MainWindow, number: int) -> None:
    target = QApplication.focusWidget() or window
    qtbot.keyClick(target, getattr(Qt.Key, f"Key_{number}"), Qt.KeyboardModifier.ControlModifier)


@pytest.mark.parametrize(("number", "name"), [(1, "settings"), (4, "details"), (5, "transcript"), (6, "charts")])
def test_ctrl_n_moves_the_focus_into_a_panel_in_view_and_closes_it_only_from_inside(qtbot, make_window, number,
                                                                                    name) -> None:
    """Ctrl+4 … Ctrl+6 (and Ctrl+1 on the Settings tab in front) closed the panel instead of moving the focus."""
    window = make_window()
    window.panels.charts.build()  # as `beamwise gui` does after the first paint
    window.show()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    window.question.setFocus()
    dock = window.docks[name]
    assert dock.isVisible()
    press(qtbot, window, number)
    assert dock.isVisible() and dock.isAncestorOf(QApplication.focusWidget())
    press(qtbot, window, number)  # the focus is in it: this one closes it
    assert dock.isHidden()


@pytest.mark.parametrize(("number", "name", "nothing_to_focus"), [
    (1, "settings", lambda window: window.controls.setEnabled(False)),  # greyed while a search runs
    (6, "charts", lambda window: None),  # not built yet: `beamwise gui` builds them after the first paint
])
def test_ctrl_n_on_a_panel_with_no_control_to_focus_focuses_the_panel(qtbot, make_window, number, name,
                                                                      nothing_to_focus) -> None:
    """The focus stayed where it was: the shortcut neither moved it there nor, pressed again, closed the panel."""
    window = make_window()
    nothing_to_focus(window)
    window.show()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    window.question.setFocus()
    dock = window.docks[name]
    press(qtbot, window, number)
    assert dock.isVisible() and dock.widget() is QApplication.focusWidget()
    press(qtbot, window, number)
    assert dock.isHidden()


# 6 ------------------------------------------------------------------------------------------------------------


def test_closing_with_a_broken_delimiter_keeps_every_other_setting(make_window, qsettings) -> None:
    """`except ValueError: pass` dropped the beams, width, KV budget and policy set since."""
    window = make_window()
    c = window.controls
    c.delimiter.setText("\\nStep")
    c.beams.spin.setValue(5)
    c.width.spin.setValue(3)
    c.kv_budget.spin.setValue(48)
    c.policy.setCurrentIndex(c.policy.findData("lbs"))
    c.delimiter.setText("\\x")
    assert not c.is_valid()
    window.close()
    _model, search, cache = saved.load_configs(qsettings)
    assert (search.beams, search.width, cache.kv_budget_bytes, cache.policy) == (5, 3, 48_000_000, "lbs")
    assert search.step_delimiter == "\nStep"  # the last valid one
    assert c.delimiter.text() == "\\x"  # the field itself was left as typed


# 7 ------------------------------------------------------------------------------------------------------------


def refused_unstarted(question, loaded, search, cache, *, should_stop) -> Iterator[Any]:
    """The engine's refusal of a question longer than the model's context: its RunFailed alone."""
    yield ev.RunFailed("InvalidPrompt", "The prompt is 180048 tokens; the model's context holds 8192.")


def raises_before_the_run(question, loaded, search, cache, *, should_stop) -> Iterator[Any]:
    """app/preflight.py check_memory's refusal, raised before the engine's run begins."""
    from engine.errors import SearchTooLarge

    raise SearchTooLarge(10**12, 10**9, "--beams 1 with --width 2", 0.8)


@pytest.mark.parametrize("run", [refused_unstarted, raises_before_the_run])
def test_a_run_refused_before_it_started_shows_its_question_and_the_emulated_gpu(qtbot, make_window, warnings,
                                                                                 run) -> None:
    """The prompt box and the transcript were empty and the legend and charts lost "emulated", where the KV
    budget's refusal (after RunStarted) shows the question and keeps it."""
    window = make_window(run=run)
    window.panels.charts.build()
    small(window)
    assert isinstance(run_to_end(qtbot, window, window.start_run), ev.RunFailed)
    text = window.panels.transcript.plain_text()
    assert text.startswith(f"Question\n{QUESTION}") and "could not run" in text
    assert window.panels.tree.data.node(ROOT_ID).text == QUESTION
    assert window.panels.tree.legend.emulated and window.session.series.emulated
    window.panels.charts.flush()
    assert "emulated" in window.panels.charts.title("device")


# 8 ------------------------------------------------------------------------------------------------------------


def shoot(qtbot, window: MainWindow, tmp_path: Path) -> list[int]:
    """Run the window's question under a Screenshot whose app only records its exit codes."""
    codes: list[int] = []
    shooter = Screenshot(SimpleNamespace(exit=codes.append), window, tmp_path / "s.png")
    run_to_end(qtbot, window, window.start_run)
    shooter.gaps.stop()
    return codes


def test_a_screenshot_of_a_model_that_does_not_load_says_why_in_the_command_lines_words(qtbot, make_window,
                                                                                          warnings, tmp_path,
                                                                                          capsys) -> None:
    """It printed an event-loop gap "during the search" though none ran, and "Choose another model under Settings >
    Model, then press Run." to a user of the command line."""
    window = make_window()
    small(window)
    window.controls.model_picker.set_source("bad/folder")
    assert shoot(qtbot, window, tmp_path) == [2]
    out, err = capsys.readouterr()
    assert "event-loop gap" not in out and "Settings > Model" not in err
    said, last = err.splitlines()
    assert said.startswith("beamwise: Could not load the model: no model at bad/folder. Pick the bundled model")
    assert last == "beamwise: error: the run failed; no screenshot was saved."


def test_a_screenshot_of_a_refused_run_names_the_option_and_prints_no_gap(qtbot, make_window, warnings, tmp_path,
                                                                        capsys) -> None:
    def refused(question, loaded, search, cache, *, should_stop) -> Iterator[Any]:
        yield next(iter(fake_run(question, search, cache)))
        yield ev.RunFailed("KVBudgetTooSmall", "KV budget 2.5 MB is too small for one candidate. Raise --kv-budget.")

    window = make_window(run=refused)
    small(window)
    assert shoot(qtbot, window, tmp_path) == [2]
    out, err = capsys.readouterr()
    assert "event-loop gap" not in out
    assert err == ("beamwise: The search could not run: KV budget 2.5 MB is too small for one candidate. Raise "
                   "--kv-budget.\nbeamwise: error: the run failed; no screenshot was saved.\n")


# 9 ------------------------------------------------------------------------------------------------------------


def stopped_in_step_two(question, loaded, search, cache, *, should_stop) -> Iterator[Any]:
    """Step 2's candidates written, then Stop: RunCancelled(1), as the engine ends a run stopped mid-step."""
    stream = list(fake_run(question, search, cache))
    second = next(i for i, e in enumerate(stream) if isinstance(e, ev.StepStarted) and e.step == 2)
    yield from stream[: second + 6]
    yield ev.RunCancelled(step=1)


def test_stop_drops_the_step_in_progress_from_the_tree_live_and_replayed(qtbot, saving_window) -> None:
    """Step 2's candidates stayed as grey "..." boxes with no score, where the status bar said the step in
    progress is dropped."""
    window = saving_window(lambda q, loaded, s, c, *, should_stop, history=(): stopped_in_step_two(
        q, loaded, s, c, should_stop=should_stop))
    small(window)
    assert isinstance(run_to_end(qtbot, window, window.start_run), ev.RunCancelled)
    tree = window.panels.tree
    for _ in range(2):  # live, then the recorded session opened again
        dropped = [n.id for n in tree.data.nodes.values() if n.step == 2]
        kept = [n.id for n in tree.data.nodes.values() if n.step <= 1]
        assert dropped and not any(tree.is_shown(i) for i in dropped)
        assert all(tree.is_shown(i) for i in kept)
        window.open_session(window.current_session)
    tree.set_collapse_pruned(True)  # the boxes step 1 kept are leaves now, not branches that led nowhere
    chosen = [n.id for n in tree.data.nodes.values() if n.step == 1 and n.state == "kept"]
    assert chosen and all(tree.is_shown(i) for i in chosen)
    assert not any(tree.is_shown(i) for i in dropped)
