"""The main window: runs through the bridge, Stop, errors as dialogs, controls, settings, sessions, launch."""

from __future__ import annotations

import argparse
import gc
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QMessageBox

from app.gui.main_window import MainWindow
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import CacheConfig, ModelSpec, SearchConfig
from tests.test_gui_bridge import CountingLoader, CycleLoader, gated


def small(window: MainWindow, source: str = "synthetic:fake", **search: Any) -> None:
    settings = {"beams": 2, "width": 2, "max_steps": 3, **search}
    window.controls.set_configs(ModelSpec(source=source), SearchConfig(**settings), CacheConfig())
    window.question.setPlainText("How fast is the train?")


def run_to_end(qtbot, window: MainWindow, timeout: int = 5000) -> Any:
    with qtbot.waitSignal(window.run_ended, timeout=timeout) as blocker:
        assert window.start_run()
    return blocker.args[0]


def expected_events(**search: Any) -> list[Any]:
    return list(fake_run("How fast is the train?", SearchConfig(**{"beams": 2, "width": 2, "max_steps": 3,
                                                                    **search})))


def assert_tree_matches(window: MainWindow, events: list[Any]) -> None:
    tree = window.panels.tree.data
    texts = [e for e in events if isinstance(e, ev.CandidateText)]
    assert len(tree.candidates()) == len(texts)
    for selected in (e for e in events if isinstance(e, ev.StepSelected)):
        assert all(tree.node(i).state in ("kept", "finished", "final") for i in selected.kept)
        assert all(tree.node(i).state == "pruned" for i in selected.pruned)


def test_a_run_fills_the_tree_status_bar_and_transcript(qtbot, make_window):
    window = make_window()
    small(window)
    terminal = run_to_end(qtbot, window)
    events = expected_events()
    assert terminal == events[-1]
    assert_tree_matches(window, events)
    tree = window.panels.tree.data
    assert tree.chosen_path == terminal.path
    assert all(tree.node(i).state == "final" for i in terminal.path)
    assert window.status.step.text() == "step 3/3"
    assert "emulated GPU" in window.status.device.text()
    assert window.status.policy.text() == "policy: lbs"
    assert window.status.speed.text() == "8.0 cand-tok/s"
    assert f"goodput: {terminal.goodput:.1f}" in window.status.speed.toolTip()
    assert "completion time" in window.status.speed.toolTip()
    done = f"Done: {terminal.steps} steps, score {terminal.score:.3f}, goodput {terminal.goodput:.1f} tok/s"
    assert window.statusBar().currentMessage() == done  # the score to three places, as the tree and transcript
    assert "80 km/h" in window.panels.transcript.plain_text()
    assert window.run_action.isEnabled() and not window.stop_action.isEnabled()


def test_a_run_leaves_what_was_alive_before_it_out_of_the_collectors_full_passes(qtbot, make_window):
    """A full collection walked every object Python tracks (~400,000 with torch and the window): 200-500 ms
    holding the GIL mid-run. What is alive at a run's start is frozen while it runs, so its passes never walk it,
    and thawed at its end, so a cycle that became garbage meanwhile (a failed run's tensors) is still collected."""
    window = make_window()
    small(window)
    before_run = [object()]  # a tracked object made before the run, like the window's and torch's own
    assert any(o is before_run for o in gc.get_objects())
    seen_mid_run = []
    apply_event = window.apply_event

    def watching(event) -> None:
        if not seen_mid_run:
            seen_mid_run.append(not any(o is before_run for o in gc.get_objects()))
        apply_event(event)

    window.apply_event = watching
    try:
        run_to_end(qtbot, window)
        assert seen_mid_run == [True]  # during the run no generation holds it: no pass walks it
        assert gc.get_freeze_count() == 0 and any(o is before_run for o in gc.get_objects())
    finally:
        gc.unfreeze()


def test_a_model_replaced_by_a_run_is_freed_before_the_next_one_loads(qtbot, make_window):
    """A run's start freezes what is alive, the loaded model too, and a frozen cycle is never collected: the
    bridge's collection before the next load (tests/test_gui_bridge.py) left a model held by a reference cycle
    in memory beside the next one, on a GPU two models' weights at once."""
    loader = CycleLoader()
    window = make_window(loader=loader)
    gc.disable()  # no automatic pass may free it by chance: only the bridge's own
    try:
        for source in ("synthetic:fake", "synthetic:other"):
            small(window, source=source)
            run_to_end(qtbot, window)
    finally:
        gc.enable()
        gc.unfreeze()
    assert loader.alive_at_next_load == [False]


def test_ctrl_enter_in_the_question_box_runs(qtbot, make_window):
    window = make_window()
    small(window)
    with qtbot.waitActive(window):
        window.show()
        window.activateWindow()
    window.question.setFocus()
    with qtbot.waitSignal(window.run_ended, timeout=5000) as blocker:
        qtbot.keyClick(window.question, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert isinstance(blocker.args[0], ev.RunFinished)
    assert "\n" not in window.question.toPlainText()


def test_empty_question_does_not_run(qtbot, make_window):
    window = make_window()
    small(window)
    window.question.setPlainText("   ")
    assert not window.run_action.isEnabled()
    assert not window.start_run()
    assert "Type a question" in window.statusBar().currentMessage()


def test_stop_mid_run_leaves_a_consistent_tree_and_a_second_run_works(qtbot, make_window):
    gate = threading.Event()
    window = make_window(run=gated(gate))
    small(window, max_steps=5)

    def stop_after_first_step(event: Any) -> None:
        if isinstance(event, ev.StepSelected) and event.step == 1:
            assert window.stop_action.isEnabled() and not window.run_action.isEnabled()
            window.stop_action.trigger()
            gate.set()

    window.bridge.event_emitted.connect(stop_after_first_step)
    terminal = run_to_end(qtbot, window)
    assert isinstance(terminal, ev.RunCancelled) and terminal.step == 1
    events = list(fake_run("q", SearchConfig(beams=2, width=2, max_steps=1)))[:-1]
    assert_tree_matches(window, events)
    assert not [n for n in window.panels.tree.data.candidates() if n.state == "running"]
    assert window.run_action.isEnabled()

    window.bridge.event_emitted.disconnect(stop_after_first_step)
    terminal = run_to_end(qtbot, window)
    assert isinstance(terminal, ev.RunFinished)
    assert_tree_matches(window, expected_events(max_steps=5))


def test_stop_before_step_1_says_no_step_has_begun(qtbot, make_window):
    """Esc while the model read the question said "the step in progress is dropped, the steps chosen so far are
    kept": there was neither."""
    gate = threading.Event()
    window = make_window(run=gated(gate))
    small(window, max_steps=3)
    said: list[str] = []

    def stop_at_start(event: Any) -> None:
        if isinstance(event, ev.RunStarted):
            window.stop_action.trigger()
            said.append(window.statusBar().currentMessage())
            gate.set()

    window.bridge.event_emitted.connect(stop_at_start)
    run_to_end(qtbot, window)
    assert said == ["Stopping: no step has begun yet: the run ends before step 1…"]


def test_stop_while_the_model_loads_says_nothing_was_recorded(qtbot, make_window):
    """Esc while the model loaded ended the request without a search, and the status bar went on reading the
    heartbeat's "loading the model, 3.2 s" with "step 0/3" beside it."""
    loaded = threading.Event()

    class SlowLoader(CountingLoader):
        def __call__(self, spec: ModelSpec, device: str, progress: Any) -> Any:
            loaded.wait(5)
            return super().__call__(spec, device, progress)

    window = make_window(loader=SlowLoader())
    small(window)
    with qtbot.waitSignal(window.run_ended, timeout=5000) as blocker:
        assert window.start_run()
        window.stop_action.trigger()
        loaded.set()
    assert blocker.args[0] is None  # no search ran: no terminal event
    assert window.statusBar().currentMessage() == "Stopped before the search started: nothing was recorded."
    assert window.status.step.text() == "step -"
    assert window.run_action.isEnabled()


def test_a_run_cancelled_inside_a_step_counts_the_steps_it_kept(qtbot, make_window):
    """Stopped in step 2, the status bar went on reading "step 2/3" beside "Stopped after step 1"."""
    def cancelled_in_step_two(question: str, loaded: Any, search: SearchConfig, cache: CacheConfig, *,
                              should_stop: Any) -> Iterator:  # fmt: skip
        stream = list(fake_run(question, search, cache))
        second = next(i for i, e in enumerate(stream) if isinstance(e, ev.StepStarted) and e.step == 2)
        yield from stream[: second + 6]  # step 2 started, a group, a few candidates' texts
        yield ev.RunCancelled(step=1)

    window = make_window(run=cancelled_in_step_two)
    small(window)
    assert isinstance(run_to_end(qtbot, window), ev.RunCancelled)
    assert window.status.step.text() == "step 1/3"
    assert window.statusBar().currentMessage() == "Stopped after step 1."


def test_a_bad_model_path_shows_a_dialog_and_the_window_stays_usable(qtbot, make_window, warnings):
    window = make_window()
    small(window, source="bad/model/folder")
    assert run_to_end(qtbot, window) is None
    assert len(warnings) == 1
    title, text = warnings[0]
    assert title == "Could not load the model"
    assert "bad/model/folder" in text and "Choose another model" in text
    assert window.status.model.text() == "model: not loaded"
    assert window.run_action.isEnabled() and window.controls.isEnabled()
    small(window)
    assert isinstance(run_to_end(qtbot, window), ev.RunFinished)


def test_an_engine_failure_event_shows_its_message(qtbot, make_window, warnings):
    def failing(question: str, loaded: Any, search: SearchConfig, cache: CacheConfig, *, should_stop: Any) -> Iterator:
        yield next(iter(fake_run(question, search, cache)))
        yield ev.RunFailed(error="KVBudgetTooSmall", message="KV budget 1 MB is too small. Raise the KV budget.")

    window = make_window(run=failing)
    small(window)
    assert isinstance(run_to_end(qtbot, window), ev.RunFailed)
    assert warnings == [("The search could not run", "KV budget 1 MB is too small. Raise the KV budget.")]
    assert window.run_action.isEnabled()


def test_an_engine_exception_is_reported_and_the_next_run_works(qtbot, make_window, warnings):
    calls = []

    def flaky(question: str, loaded: Any, search: SearchConfig, cache: CacheConfig, *, should_stop: Any) -> Iterator:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return fake_run(question, search, cache, should_stop=should_stop)

    window = make_window(run=flaky)
    reported: list[tuple[str, str]] = []
    window.error_reported.connect(lambda title, text: reported.append((title, text)))
    small(window)
    assert isinstance(run_to_end(qtbot, window), ev.RunFailed)
    title, text = reported[0]
    assert title == "The search could not run" and "RuntimeError: boom" in text  # it raised before it began
    assert "fault in Beamwise, not in your settings" in text and "Try fewer beams" not in text
    assert warnings == []  # not the plain warning: a dialog whose Show Details holds the traceback
    (box,) = window.findChildren(QMessageBox)
    assert box.isVisible() and box.text() == text
    assert box.detailedText().startswith("Traceback") and "RuntimeError: boom" in box.detailedText()
    box.accept()
    assert isinstance(run_to_end(qtbot, window), ev.RunFinished)


def test_controls_show_candidates_per_step_and_block_invalid_settings(make_window):
    window = make_window()
    controls = window.controls
    small(window)
    controls.beams.set_value(8)
    controls.width.set_value(3)
    assert controls.candidates_label.text().startswith("24 candidates per step")
    assert controls.beams.spin.minimum() == 1 and controls.width.spin.maximum() == 16
    controls.beams.set_value(0)  # clamped by the spin range: N = 0 cannot be entered
    assert controls.beams.value() == 1

    controls.delimiter.setText(r"\x4")
    assert not controls.is_valid() and not window.run_action.isEnabled()
    assert "broken escape" in controls.error_label.text() and not controls.error_label.isHidden()
    assert "Fix the settings" in window.run_action.toolTip()
    controls.delimiter.setText("")  # empty: steps are cut by length only
    assert controls.is_valid() and controls.configs()[1].step_delimiter is None

    controls.top_p.set_value(0.0)
    assert "Top-p must be in (0, 1]" in controls.error_text() and not window.run_action.isEnabled()
    controls.top_p.set_value(0.9)
    controls.kv_budget.set_value(64)
    assert controls.is_valid() and window.run_action.isEnabled() and controls.error_label.isHidden()
    _, search, cache = controls.configs()
    assert (search.beams, search.width, search.top_p, cache.kv_budget_bytes) == (1, 3, 0.9, 64_000_000)


def test_settings_and_question_persist_in_qsettings(qtbot, make_window, qsettings, tmp_path):
    window = make_window()
    small(window, beams=7)
    window.controls.policy.setCurrentIndex(window.controls.policy.findData("lbs"))
    window.question.setPlainText("Remember me")
    window.close()
    assert Path(qsettings.fileName()).parent == tmp_path

    again = make_window(settings=QSettings(qsettings.fileName(), QSettings.Format.IniFormat))
    model, search, cache = again.controls.configs()
    assert (model.source, search.beams, cache.policy) == ("synthetic:fake", 7, "lbs")
    assert again.question.toPlainText() == "Remember me"


def test_damaged_settings_fall_back_to_defaults(make_window, qsettings):
    qsettings.setValue("format", 1)
    qsettings.setValue("search", '{"beams": -3}')
    qsettings.sync()
    window = make_window()
    assert window.controls.configs()[1] == SearchConfig()


def test_recorded_sessions_reopen_and_run_again(qtbot, make_window, tmp_path, warnings):
    store_mod = pytest.importorskip("app.store")
    db = tmp_path / "sessions.db"
    store = store_mod.SessionStore(db)
    window = make_window(store=store, store_factory=lambda: store_mod.SessionStore(db))
    assert window.sessions is not None
    small(window, beams=3)
    run_to_end(qtbot, window)
    session_id = window.current_session
    assert session_id is not None
    live = {n.id: (n.state, n.score) for n in window.panels.tree.data.nodes.values()}
    from app.export import render_session
    from app.export.markdown import render_markdown
    from app.export.report import report_of

    shown = render_markdown(report_of(window.session, store.get_session(session_id)))  # the window's own fold
    assert render_session(store, session_id, "md") == shown and "### Step 3 (candidate" in shown

    for panel in window.panels.all():
        panel.reset()
    window.open_session(session_id)
    assert {n.id: (n.state, n.score) for n in window.panels.tree.data.nodes.values()} == live
    assert window.status.step.text() == "step 3/3"

    small(window, beams=1)
    window.question.setPlainText("")
    window.sessions.run_again_requested.emit(session_id)
    assert window.controls.configs()[1].beams == 3
    assert window.question.toPlainText() == "How fast is the train?"
    assert warnings == []


@pytest.mark.usefixtures("scratch_models")
def test_run_again_picks_the_sessions_model_or_says_it_is_not_here(make_window, tmp_path):
    """Sessions record the model's name: Run again on a synthetic model's session ('synthetic:tiny-qwen2 (random
    weights)') kept the model set before and said nothing; a name no model here has keeps it and says so."""
    import dataclasses

    from app.recorder import SessionRecorder
    from app.store import SessionStore

    store = SessionStore(tmp_path / "s.db")
    ids = {}
    for name in ("synthetic:tiny-qwen2 (random weights)", "my-own-model"):
        recorder = SessionRecorder(store)
        for event in fake_run("How fast is the train?"):
            recorder.write(dataclasses.replace(event, model=name) if isinstance(event, ev.RunStarted) else event)
        ids[name] = recorder.session_id
    window = make_window(store=store, store_factory=lambda: SessionStore(tmp_path / "s.db"))
    small(window, source="synthetic:tiny-llama")
    window.sessions.run_again_requested.emit(ids["synthetic:tiny-qwen2 (random weights)"])
    assert window.controls.configs()[0].source == "synthetic:tiny-qwen2"
    assert "not in Models" not in window.statusBar().currentMessage()
    window.sessions.run_again_requested.emit(ids["my-own-model"])
    assert window.controls.configs()[0].source == "synthetic:tiny-qwen2"
    said = window.statusBar().currentMessage()
    assert "it ran on my-own-model, which is not one model in Models, so the model stays as it was" in said, said


def gui_args(tmp_path: Path, *extra: str) -> argparse.Namespace:
    from app.cli import build_parser

    return build_parser().parse_args(["gui", "--db", str(tmp_path / "s.db"), *extra])


def test_screenshot_needs_a_question(tmp_path, capsys):
    from app.gui.launch import main

    assert main(gui_args(tmp_path, "--screenshot", str(tmp_path / "x.png"))) == 2
    assert "--screenshot needs --question" in capsys.readouterr().err


@pytest.mark.parametrize("question", ["", "  \n"])
def test_a_screenshot_of_an_empty_question_is_refused_as_run_refuses_it(tmp_path, capsys, question):
    """It said "--screenshot needs --question", though --question was given."""
    from app.gui.launch import main

    assert main(gui_args(tmp_path, "--question", question, "--screenshot", str(tmp_path / "x.png"))) == 2
    err = capsys.readouterr().err
    assert "the question is empty" in err and "needs --question" not in err
    assert 'beamwise gui --question "What is 12*7?"' in err and "--question-file" not in err  # gui reads no file


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, which no one can write to")
@pytest.mark.parametrize("shot", ["/proc/x.png", "/proc/beamwise/x.png", "/proc/version"])
def test_a_screenshot_path_no_one_can_write_is_refused_before_the_window(tmp_path, capsys, monkeypatch, shot):
    """os.access says yes to root in /proc: the whole search ran, then "could not write the screenshot"."""
    from app.gui import launch

    monkeypatch.setattr(launch, "_build_window", lambda *a, **k: pytest.fail("the window was built"))
    assert launch.main(gui_args(tmp_path, "--question", "q", "--screenshot", shot)) == 2
    assert f"cannot save the screenshot to {shot}: " in capsys.readouterr().err


def test_a_screenshot_check_leaves_a_file_already_there_and_its_folder_as_they_were(tmp_path):
    from app.gui.launch import unwritable

    old = tmp_path / "old.png"
    old.write_bytes(b"picture")
    assert unwritable(old) is None and unwritable(tmp_path / "new" / "x.png") is None
    assert old.read_bytes() == b"picture" and sorted(p.name for p in tmp_path.iterdir()) == ["old.png"]


def test_a_screenshot_run_the_settings_refuse_says_why(tmp_path, capsys):
    """It said only "check the question and the settings"."""
    from app.gui.launch import main

    args = gui_args(tmp_path, "--question", "q", "--screenshot", str(tmp_path / "x.png"), "--model",
                    "synthetic:tiny-llama", "--verifier", "prm", "--verifier-model", "synthetic:tiny-skywork-prm",
                    "--entropy-exit")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "the run could not start: Fix the settings first: The Skywork-o1-Open-PRM" in err
    assert not (tmp_path / "x.png").exists()


def test_typed_options_override_remembered_settings_only_where_given(tmp_path):
    from app.gui.launch import explicit_configs

    remembered = (ModelSpec(source="synthetic:tiny-llama"), SearchConfig(beams=9, temperature=0.3),
                  CacheConfig(policy="layerwise"))
    model, search, cache = explicit_configs(gui_args(tmp_path, "--width", "5"), remembered)
    assert (model.source, search.beams, search.width, search.temperature, cache.policy) == (
        "synthetic:tiny-llama", 9, 5, 0.3, "layerwise")


@pytest.mark.skipif(not (Path(__file__).parents[1] / "engine" / "search.py").exists(), reason="no engine yet")
def test_real_engine_on_a_tiny_synthetic_model_end_to_end_with_screenshot(qtbot, tmp_path, monkeypatch):
    """`beamwise gui --question ... --screenshot` on synthetic:tiny-llama: the real engine through the window."""
    from app.gui import launch

    windows: list[MainWindow] = []
    build = launch._build_window
    monkeypatch.setattr(launch, "_build_window", lambda *a, **k: windows.append(build(*a, **k)) or windows[-1])
    shot = tmp_path / "shot.png"
    args = gui_args(tmp_path, "--question", "What is 2+3?", "--screenshot", str(shot), "--model",
                    "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4",
                    "--max-steps", "2", "--step-delimiter", "none")
    assert launch.main(args) == 0
    assert shot.stat().st_size > 10_000
    window = windows[0]
    assert isinstance(window.last_terminal, ev.RunFinished)
    tree = window.panels.tree.data
    assert len(tree.candidates()) == 2 * 2 + 2 * 2  # step 1: N*M from the prompt, step 2: N kept * M
    assert tree.chosen_path == window.last_terminal.path
    assert window.current_session is not None
    assert window.plan_bar.plan is not None  # the picture shows the plan, not "Planning memory…" (a short run)


def test_launch_without_a_question_opens_the_window_and_loads_the_model(qtbot, tmp_path, monkeypatch, qsettings):
    """`beamwise gui` (no question): the window shows and the model loads in the background."""
    from app.gui import launch
    from app.gui import settings as saved

    monkeypatch.setattr(saved, "default_settings", lambda: qsettings)  # never the user's settings
    seen: dict[str, Any] = {}
    build = launch._build_window

    def build_and_watch(*args: Any, **kwargs: Any) -> MainWindow:
        window = build(*args, **kwargs)
        seen["window"] = window

        def loaded(name: str, device: str) -> None:
            seen["loaded"] = (name, device, window.isVisible(), window.status.model.text())
            from PySide6.QtWidgets import QApplication

            # exit(), not window.close(): closing the last window inside exec() posts a Quit event
            # that would end the next test's event loop. main() closes the window after exec().
            QApplication.instance().exit(0)

        window.bridge.model_loaded.connect(loaded)
        return window

    monkeypatch.setattr(launch, "_build_window", build_and_watch)
    assert launch.main(gui_args(tmp_path, "--model", "synthetic:tiny-llama")) == 0
    name, device, visible, label = seen["loaded"]
    assert visible and "tiny-llama" in name and "emulated GPU" in device and "tiny-llama" in label
    assert qsettings.value("window/geometry") is not None  # closing remembered the layout


def test_the_status_bar_says_what_an_idle_engine_gave_back(make_window):
    window = make_window()
    window.bridge.memory_released.emit(7_500_000_000, 2_900_000_000)
    message = window.statusBar().currentMessage()
    assert "gave back 7.5 GB of GPU memory and 2.9 GB of pinned RAM" in message and "model stays loaded" in message
    window.bridge.memory_released.emit(0, 1_000_000_000)
    assert "gave back 1.0 GB of pinned RAM for other programs" in window.statusBar().currentMessage()


@pytest.mark.usefixtures("scratch_models")
def test_run_again_before_the_engine_is_in_waits_for_it_and_imports_nothing_on_the_gui_thread(make_window, tmp_path,
                                                                                              monkeypatch):
    """Run again in the first seconds, while the background thread imported transformers, imported engine.bundled
    on the GUI thread beside it: an ImportError traceback, nothing loaded. It waits for the import now."""
    import dataclasses

    from app.gui import main_window
    from app.recorder import SessionRecorder
    from app.store import SessionStore

    store = SessionStore(tmp_path / "s.db")
    recorder = SessionRecorder(store)
    for event in fake_run("How fast is the train?"):
        recorder.write(dataclasses.replace(event, model="synthetic:tiny-qwen2 (random weights)")
                       if isinstance(event, ev.RunStarted) else event)
    window = make_window(store=store, store_factory=lambda: SessionStore(tmp_path / "s.db"))
    small(window, source="synthetic:tiny-llama")
    window.question.setPlainText("")
    asked = []
    monkeypatch.setattr(main_window, "engine_in_reach", lambda: False)
    monkeypatch.setattr(main_window.model_library, "source_of_name", lambda name: asked.append(name))
    monkeypatch.setattr(window, "import_engine", lambda: asked.append("import"))
    window.sessions.run_again_requested.emit(recorder.session_id)
    assert asked == ["import"]  # the import asked for, no engine name read
    assert window.controls.configs()[0].source == "synthetic:tiny-llama" and window.question.toPlainText() == ""
    assert f"the settings of session {recorder.session_id} load once they are in" in window.statusBar().currentMessage()
    monkeypatch.undo()
    window._on_engine_imported("")  # the import ended
    assert window.controls.configs()[0].source == "synthetic:tiny-qwen2"
    assert window.question.toPlainText() == "How fast is the train?"
