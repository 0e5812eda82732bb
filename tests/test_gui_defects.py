"""Defects a new user's walk through the window found: 64-bit seeds, the reason Run is refused, cut text in the tree
boxes and the status bar, stale status fields, the legend on a short tree, and words that said what did not happen."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QApplication

from app.gui.main_window import MainWindow
from app.gui.tree_items import NODE_W, PAD, Ink, NodeItem
from app.session import Node, SessionModel
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import SEED_RANGE, CacheConfig, ModelSpec, SearchConfig
from tests.test_gui_bridge import CountingLoader

QUESTION = "How fast is the train?"


def small(window: MainWindow, source: str = "synthetic:fake", **search: Any) -> None:
    window.controls.set_configs(ModelSpec(source=source), SearchConfig(**{"beams": 2, "width": 2, "max_steps": 3,
                                                                          **search}), CacheConfig())
    window.question.setPlainText(QUESTION)


def run_to_end(qtbot, window: MainWindow) -> Any:
    with qtbot.waitSignal(window.run_ended, timeout=5000) as blocker:
        assert window.start_run()
    return blocker.args[0]


def shown_at(window: MainWindow, width: int, height: int) -> None:
    window.show()
    window.resize(width, height)
    for _ in range(3):
        QApplication.processEvents()


@pytest.mark.parametrize("seed", [2**31, 3_000_000_000, SEED_RANGE[1]])
def test_a_seed_past_32_bits_is_shown_run_and_remembered(make_window, qsettings, seed):
    """`beamwise gui --seed 3000000000` aborted with OverflowError in the 32-bit seed box, and so did "Run again"
    of a session the command line ran with such a seed; the command line takes 0 to 2**63-1."""
    window = make_window()
    small(window, seed=seed)
    assert window.controls.seed.text() == str(seed) and window.controls.configs()[1].seed == seed
    window.close()  # saves the settings
    again = make_window()
    assert again.controls.configs()[1].seed == seed


def test_the_seed_box_keeps_a_spin_boxs_keys_and_takes_only_seeds(make_window, qtbot):
    """The seed field holds Python ints: Up/Down step it within 0..2**63-1, and a number past the range or a letter
    cannot be typed."""
    window = make_window()
    seed = window.controls.seed
    seed.set_value(SEED_RANGE[1] - 1)
    qtbot.keyClick(seed, Qt.Key.Key_Up)
    qtbot.keyClick(seed, Qt.Key.Key_Up)
    assert seed.value() == SEED_RANGE[1] and window.controls.configs()[1].seed == SEED_RANGE[1]
    seed.selectAll()
    qtbot.keyClicks(seed, "12a3")
    assert seed.text() == "123" and seed.value() == 123
    qtbot.keyClicks(seed, "9" * 30)
    assert int(seed.text()) <= SEED_RANGE[1] and seed.value() == int(seed.text())
    seed.set_value(0)
    qtbot.keyClick(seed, Qt.Key.Key_Down)
    assert seed.value() == 0


def test_an_invalid_setting_says_why_in_the_status_bar_and_ctrl_enter_says_it_again(make_window, qtbot):
    """With `\\x` as the step delimiter (or top-p 0) Run went grey with no reason in sight: the red line sits at the
    bottom of the scrolled settings, and Ctrl+Enter did nothing at all."""
    window = make_window()
    small(window)
    shown_at(window, 1400, 900)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    window.controls.delimiter.setText(r"\x")
    message = window.statusBar().currentMessage()
    assert message.startswith("Fix the settings first: ") and "broken escape" in message
    window.statusBar().clearMessage()
    window.question.setFocus()
    qtbot.keyClick(window.question, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert window.statusBar().currentMessage().startswith("Fix the settings first: ") and not window.running
    window.controls.delimiter.setText("")
    assert window.statusBar().currentMessage() == "" and window.run_action.isEnabled()
    window.controls.top_p.set_value(0.0)
    assert "Top-p" in window.statusBar().currentMessage()


@pytest.mark.parametrize("nbytes", [737_300, 99_999_999, 999_900_000_000])
def test_a_boxs_pcie_line_is_never_cut_inside_a_figure(qtbot, nbytes):
    """An offloading run's boxes read "GPU 0% · H2D 656.6 kB  D2H 737.3 k": the box cut the last unit off."""
    item = NodeItem(5, Ink())
    node = Node(id=5, parent=0, step=1, text="a step", score=0.5, group=0, device_bytes=0, host_bytes=1,
                h2d_bytes=nbytes, d2h_bytes=nbytes)
    item.set_node(node)
    traffic = item.labels().traffic
    assert QFontMetrics(Ink().small).horizontalAdvance(traffic) <= NODE_W - 2 * PAD, traffic
    assert traffic.startswith("GPU 0% · H2D ") and traffic.endswith(("B", "…")), traffic


def test_status_messages_are_readable_whole_at_the_default_size(make_window, qtbot):
    """At 1400x900 the bar kept 320 px for its message: "Stopped before the search started: nothing was recorde"
    ran into "model: …", and the heartbeat was cut too."""
    window = make_window()
    small(window)
    shown_at(window, 1400, 900)
    run_to_end(qtbot, window)
    bar, status = window.statusBar(), window.status
    status.loaded("synthetic:tiny-qwen2 (random weights)", "cpu (emulated GPU)")  # the walk's own fields
    for message in ("Stopped before the search started: nothing was recorded.",
                    "step 1: decoding, 19 s, 0 group(s) done, 0/4 candidates' steps ended, 37 tokens so far"):
        bar.showMessage(message)
        QApplication.processEvents()
        shown = [f for f in status.fields if f.isVisibleTo(bar)]
        left = min(f.mapTo(bar, f.rect().topLeft()).x() for f in shown)
        assert bar.fontMetrics().horizontalAdvance(message) + 12 <= left, (message, left)
        assert status.step in shown and status.speed in shown
    bar.clearMessage()
    QApplication.processEvents()
    assert [f for f in status.fields if f.isVisibleTo(bar)] == [f for f in status.fields if not f.isHidden()]


def test_a_load_stopped_by_esc_leaves_no_figures_of_the_run_before(make_window, qtbot):
    """Esc while a new model loaded left the last session's "policy: lbs · prompt: 12 tok · idle 0 slots" beside
    the new model's name, describing a run that never happened."""
    loaded = threading.Event()

    class SlowForOther(CountingLoader):
        def __call__(self, spec: ModelSpec, device: str, progress: Any) -> Any:
            if spec.source == "synthetic:other":
                loaded.wait(5)
            return super().__call__(spec, device, progress)

    window = make_window(loader=SlowForOther())
    small(window)
    run_to_end(qtbot, window)
    assert window.status.policy.text() != "policy: -" and not window.status.idle.isHidden()
    small(window, source="synthetic:other")
    with qtbot.waitSignal(window.run_ended, timeout=5000):
        assert window.start_run()
        window.stop_action.trigger()
        loaded.set()
    status = window.status
    assert (status.policy.text(), status.prompt.text(), status.verifier.text()) == ("policy: -", "prompt: -",
                                                                                     "verifier: -")
    assert status.idle.isHidden() and status.speed.text() == "- cand-tok/s"


@pytest.mark.parametrize(("size", "compact"), [((1024, 640), True), ((800, 500), True), ((1400, 900), False)])
def test_the_legend_leaves_the_boxes_in_sight_on_a_short_tree(make_window, qtbot, size, compact):
    """At 1024x640 the wrapped legend took most of the tree's 220 px and no box could be read: on a short tree it is
    one line, the whole legend in its tooltip."""
    window = make_window()
    small(window)
    shown_at(window, *size)
    run_to_end(qtbot, window)
    QApplication.processEvents()
    view = window.panels.tree
    legend = view.legend
    assert legend.compact == compact
    assert legend.height() <= view.height() // 4
    assert view.viewport().height() >= 100  # a row of boxes (74 px) shows whole
    assert "running" in legend.plain_text() and "PCIe bytes" in legend.plain_text()
    assert ("PCIe bytes" in legend.toolTip()) == compact


def test_done_gives_the_score_as_every_view_does_and_one_step_in_the_singular(make_window, qtbot):
    """The status bar said "Done: 2 steps, score 0.00" where the tree, details and transcript said 0.002, and
    "Done: 1 steps"."""
    window = make_window()
    small(window, max_steps=1)
    done = run_to_end(qtbot, window)
    assert window.statusBar().currentMessage().startswith(f"Done: 1 step, score {done.score:.3f}, ")


def test_stop_says_the_step_in_progress_is_dropped(make_window, qtbot):
    """Stop's tooltip and message said "Stop after the current decode step" while the step in progress was dropped,
    and a stop inside step 1 said "Stopped after step 0"."""
    def stopped_in_step_one(question: str, loaded: Any, search: SearchConfig, cache: CacheConfig, *,
                            should_stop: Any) -> Iterator:  # fmt: skip
        stream = list(fake_run(question, search, cache))
        yield from stream[:4]  # started, prefill, step 1 started
        yield ev.RunCancelled(step=0)

    window = make_window(run=stopped_in_step_one)
    assert "step in progress is dropped" in window.stop_action.toolTip()
    assert "current decode step" not in window.stop_action.toolTip()
    small(window)
    run_to_end(qtbot, window)
    assert window.statusBar().currentMessage() == "Stopped before step 1 finished."
    assert "Stopped before step 1 finished" in window.panels.transcript.plain_text()
    assert "step 0" not in window.panels.transcript.plain_text()


def test_a_run_that_fails_after_a_step_is_titled_by_that_step_without_a_class_name(make_window, qtbot, warnings):
    """A run that failed in step 2 was titled "The search could not run" though step 1 was drawn, and the transcript
    read "The run failed (KVBudgetTooSmall): …"."""
    message = "KV budget 1 MB is too small. Raise the KV budget."

    def fails_in_step_two(question: str, loaded: Any, search: SearchConfig, cache: CacheConfig, *,
                          should_stop: Any) -> Iterator:  # fmt: skip
        for event in fake_run(question, search, cache):
            yield event
            if isinstance(event, ev.StepStarted) and event.step == 2:
                yield ev.RunFailed(error="KVBudgetTooSmall", message=message)
                return

    window = make_window(run=fails_in_step_two)
    small(window)
    assert isinstance(run_to_end(qtbot, window), ev.RunFailed)
    assert warnings == [("The search stopped at step 2", message)]
    text = window.panels.transcript.plain_text()
    assert f"The search stopped at step 2: {message}" in text and "KVBudgetTooSmall" not in text


def test_the_transcript_counts_the_chosen_paths_own_steps():
    """The header read "Chosen path · … · 2 steps" for a path of one step: it gave the search's step count."""
    events = list(fake_run(QUESTION, SearchConfig(beams=2, width=2, max_steps=3)))
    done = events[-1]
    events[-1] = dataclasses.replace(done, path=done.path[:1])
    session = SessionModel()
    session.apply_many(events)
    assert session.outline.status.startswith(f"Chosen path · score {done.score:.3f} · 1 step · search 3 steps in ")
