"""The window on small screens: charts that stay legible at every width down to the window's minimum, settings
that do not scroll sideways, and the parts of a 1366x768 or minimum-size window that must not be clipped."""

from __future__ import annotations

import dataclasses
import html
import itertools
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, QPointF, QRectF, QSettings, Qt
from PySide6.QtGui import QImage, QPainter, QWheelEvent
from PySide6.QtWidgets import QApplication

from app.gui.bridge import SearchBridge
from app.gui.chart_axes import StepAxis
from app.gui.charts import TITLES, ChartsPanel
from app.gui.conversation import HINTS
from app.gui.main_window import MainWindow
from app.gui.status_line import MESSAGE_ROOM_PX
from app.gui.transcript import PLACEHOLDERS
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import CacheConfig, ModelSpec, SearchConfig
from tests.test_gui_bridge import CountingLoader, run_fake

SIZES = [(w, h) for w in (800, 900, 1000, 1366) for h in (190, 220, 320)]


def longest_titles_run() -> list[object]:
    """A fake run on an emulated GPU with a verifier share: every chart's title and key at their longest."""
    stream = fake_run("How fast is the train?", SearchConfig(beams=2, width=2, max_steps=12))
    return [dataclasses.replace(e, verifier_budget_bytes=120_000) if isinstance(e, ev.MemorySnapshot) else e
            for e in stream]


def parts(charts: ChartsPanel, name: str) -> dict[str, QRectF]:
    """The scene rectangles a reader must see whole: the title's text, the plotting area, both axes."""
    plot = charts.plots[name]
    label = plot.titleLabel
    return {"title": label.item.mapRectToScene(label.item.boundingRect()),
            "view": plot.vb.sceneBoundingRect(),
            "left": plot.getAxis("left").sceneBoundingRect(),
            "bottom": plot.getAxis("bottom").sceneBoundingRect()}


@pytest.fixture
def charts(qtbot) -> ChartsPanel:
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.apply_many(longest_titles_run())
    panel.flush()
    panel.show()
    return panel


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_no_chart_runs_into_another_or_out_of_the_panel_at_any_width(charts, width, height):
    charts.resize(width, height)
    for _ in range(3):  # a title that wraps lays the canvas out once more
        QApplication.processEvents()
    scene_width = charts.canvas.viewport().width()
    rects = {name: parts(charts, name) for name in TITLES}
    for name, own in rects.items():
        plot = charts.plots[name].sceneBoundingRect()
        for part, rect in own.items():
            assert rect.left() >= -0.5 and rect.right() <= scene_width + 0.5, (name, part, rect, scene_width)
            assert plot.adjusted(-0.5, -0.5, 0.5, 0.5).contains(rect), (name, part, rect, plot)
        assert not own["title"].intersects(own["view"]), (name, "title over its own plot")
    for (a, mine), (b, theirs) in itertools.combinations(rects.items(), 2):
        for (pa, ra), (pb, rb) in itertools.product(mine.items(), theirs.items()):
            assert not ra.intersects(rb), (a, pa, b, pb, ra, rb)
    for name in TITLES:
        assert charts.plots[name].vb.height() >= 60, (name, "its plotting area is too short to read")


@pytest.mark.parametrize(("steps", "pixels", "most"), [(12, 1000, 8), (12, 190, 5), (12, 100, 3), (40, 60, 2)])
def test_a_narrow_plot_shows_fewer_step_ticks(qtbot, steps, pixels, most):
    axis = StepAxis("bottom")
    [(spacing, values)] = axis.tickValues(-0.5, steps + 0.5, pixels)
    assert 2 <= len(values) <= most and values[0] == 0 and spacing == int(spacing)
    assert all(b - a == spacing for a, b in itertools.pairwise(values))


def test_on_a_narrow_panel_the_charts_take_rows_and_the_wheel_scrolls_them(charts):
    charts.resize(800, 200)
    QApplication.processEvents()
    assert charts.columns == 3
    bar = charts.scroll.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == 0
    viewport = charts.canvas.viewport()
    at = QPointF(150, 100)
    wheel = QWheelEvent(at, viewport.mapToGlobal(at), QPoint(0, 0), QPoint(0, -120), Qt.MouseButton.NoButton,
                        Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(viewport, wheel)
    assert bar.value() > 0
    charts.resize(1366, 220)
    QApplication.processEvents()
    assert charts.columns == 5 and charts.scroll.verticalScrollBar().maximum() == 0  # one row, nothing hidden


@pytest.fixture
def window(keep_window, tmp_path: Path) -> MainWindow:
    """A window with a session store, so the Sessions tab is there too."""
    store = SessionStore(tmp_path / "sessions.db")
    settings = QSettings(str(tmp_path / "beamwise.ini"), QSettings.Format.IniFormat)
    bridge = SearchBridge(loader=CountingLoader(), run=run_fake)
    return keep_window(MainWindow(bridge, settings=settings, store=store, dialogs=False))


def shown_at(window: MainWindow, width: int, height: int, dock: str | None = None) -> None:
    window.show()
    window.resize(width, height)
    if dock is not None:
        window.docks[dock].raise_()
    for _ in range(3):
        QApplication.processEvents()


@pytest.mark.parametrize("size", [(1366, 768), (1000, 700), (854, 585)])
def test_the_settings_never_scroll_sideways(window, size):
    """The docks start 440 px wide at 1366x768 and are narrower on a smaller window: every row fits."""
    shown_at(window, *size, dock="settings")
    scroll = window.docks["settings"].widget()
    assert window.docks["settings"].width() <= 440
    assert scroll.horizontalScrollBar().maximum() == 0, (window.docks["settings"].width(),
                                                         scroll.widget().minimumSizeHint().width())


def run_fake_search(qtbot, window: MainWindow) -> None:
    window.controls.set_configs(ModelSpec(source="synthetic:fake"), SearchConfig(beams=2, width=2, max_steps=3),
                                CacheConfig())
    window.question.setPlainText("How fast is the train?")
    with qtbot.waitSignal(window.run_ended, timeout=5000):
        assert window.start_run()


@pytest.mark.parametrize(("size", "all_fields"), [((1366, 768), True), ((854, 585), False)])
def test_the_status_bar_line_stays_readable_beside_its_fields(window, qtbot, size, all_fields):
    """At the window's smallest the fields took the whole bar and 'Done: 3 steps, …' showed as 'Done: ('."""
    shown_at(window, *size)
    run_fake_search(qtbot, window)
    QApplication.processEvents()
    bar, status = window.statusBar(), window.status
    message = bar.currentMessage()
    assert message.startswith("Done: 3 steps")
    fields = [f for f in status.fields if f.isVisibleTo(bar)]
    left = min((f.mapTo(bar, f.rect().topLeft()).x() for f in fields), default=bar.width())
    assert bar.fontMetrics().horizontalAdvance(message) + 12 <= left, (message, left, bar.width())
    assert (fields == status.shown_fields() and status.step in fields and status.speed in fields)
    wanted = [f for f in status.fields if not f.isHidden()]  # the fields that have something to say
    assert (fields == wanted) == all_fields


def test_a_field_that_grows_between_events_is_fitted_again(window, qtbot):
    """The device hint's mark (and the speed at the run's end) widened a field without a refit, so the fields
    could run over the message until the next step's figures (found in review)."""
    shown_at(window, 854, 585)
    run_fake_search(qtbot, window)
    status, bar = window.status, window.statusBar()
    status.device.setText("device: cpu (emulated GPU) with a long name to take the room")
    status.show_device_hint("install the CUDA build of torch")
    QApplication.processEvents()
    shown = [f for f in status.fields if f.isVisibleTo(bar)]
    used = sum(f.sizeHint().width() for f in shown)
    assert used + MESSAGE_ROOM_PX <= bar.width(), (used, bar.width(), [f.text() for f in shown])


@pytest.mark.parametrize("size", [(1366, 768), (854, 585)])
@pytest.mark.parametrize("dock", ["details", "models"])
def test_the_node_details_and_the_models_page_never_scroll_sideways(window, qtbot, size, dock):
    """At the window's smallest the details dock is 200 px: its form's long labels pushed the values out of view
    (53 px to scroll); the Models page's hub box title asked 339 px of a 330 px dock."""
    shown_at(window, 1366, 768, dock=dock)
    run_fake_search(qtbot, window)
    window.panels.details.show_node(window.session.tree.chosen_path[-1])
    shown_at(window, *size)  # shrunk from a laptop's screen, as a user drags it
    scroll = window.docks[dock].widget()
    assert scroll.horizontalScrollBar().maximum() == 0, (window.docks[dock].width(),
                                                         scroll.widget().minimumSizeHint().width())
    details = window.panels.details
    for name, value in details.values.items():  # and no value is cut: each has its text's width, inside the panel
        assert value.width() >= value.minimumSizeHint().width(), (name, value.text(), value.width())
        assert value.geometry().right() < details.width(), (name, value.geometry(), details.width())


def title_lines(charts: ChartsPanel, name: str) -> list[str]:
    """The lines a plot's title is drawn in, as wrapped."""
    lines = []
    block = charts.plots[name].titleLabel.item.document().begin()
    while block.isValid():
        text, layout = block.text(), block.layout()
        for line in (layout.lineAt(i) for i in range(layout.lineCount())):
            lines.append(text[line.textStart(): line.textStart() + line.textLength()].strip("\u2028 \xa0"))
        block = block.next()
    return lines


@pytest.mark.parametrize("width", [800, 1000, 1366])
def test_a_wrapped_key_breaks_only_between_its_entries(charts, width):
    """At 1000 px 'budget 1.0 MB' broke after '1.0', and 'MB' read as an entry of its own."""
    charts.resize(width, 220)
    QApplication.processEvents()
    keys = {}
    for name in TITLES:
        lines = title_lines(charts, name)
        keys[name] = lines[next(i for i, line in enumerate(lines) if line.startswith(("━", "┅"))):]
        assert all(line.startswith(("━", "┅")) for line in keys[name]), (name, lines)
    assert len(keys["device"]) >= 2  # the longest key (six entries, two with sizes) did wrap


@pytest.mark.parametrize("size", [(1366, 768), (854, 585)])
def test_the_follow_up_field_shows_its_hint_whole(window, size):
    """'Follow-ups come after a finished ans…' at 1366x768: the field shows the longest hint that fits it, the
    whole sentence in its tooltip."""
    shown_at(window, 1366, 768)
    shown_at(window, *size)
    box = window.talk.box
    for open_turn in (False, True):
        box.set_open(open_turn)
        hint = box.field.placeholderText()
        assert hint in HINTS[open_turn]
        assert box.field.fontMetrics().horizontalAdvance(hint) <= box.field.width() - 16, (hint, box.field.width())
        assert box.field.toolTip() in ("", HINTS[open_turn][0]) and HINTS[open_turn][0] in (hint, box.field.toolTip())


@pytest.mark.parametrize("size", [(1366, 768), (854, 585)])
def test_the_empty_transcript_shows_its_placeholder_whole(window, size):
    shown_at(window, 1366, 768)
    shown_at(window, *size)
    view = window.panels.transcript.view
    hint = view.placeholderText()
    assert hint in PLACEHOLDERS and view.fontMetrics().horizontalAdvance(hint) <= view.viewport().width() - 20


def test_a_long_plan_sentence_leaves_the_tree_whole_at_the_smallest_window(window, qtbot):
    """A refusal's advice wrapped to six lines above the tree at 854x585 and cut off the tree's bottom (its
    legend and scroll bar); the sentence keeps two lines, whole in the tooltip, and the tree all of its 220 px."""
    shown_at(window, 1366, 768)
    shown_at(window, 854, 585)
    window.controls.set_configs(ModelSpec(source="synthetic:tiny-llama"), SearchConfig(beams=8, width=4),
                                CacheConfig(kv_budget_bytes=20_000, policy="in_device"))
    window.question.setPlainText("What is 12 times 7?")
    with qtbot.waitSignal(window.plan_bar.planned, timeout=30_000) as blocker:
        window.plan_bar.refresh_now()
    QApplication.processEvents()
    whole, label = blocker.args[0].sentence, window.plan_bar.sentence
    assert blocker.args[0].state == "red" and len(whole) > 200
    assert label.text().endswith("…") and whole.startswith(label.text()[:-1].rstrip())
    assert label.height() <= 2 * label.fontMetrics().lineSpacing() + 2
    assert html.escape(whole) in window.plan_bar.toolTip()
    tree, central = window.panels.tree, window.centralWidget()
    assert tree.height() >= 220 and tree.geometry().bottom() < central.height(), (tree.geometry(), central.size())
    assert window.height() == 585  # and the window's smallest did not grow for the plan's second line


def test_the_load_banner_at_the_smallest_window_keeps_its_width_and_the_tree_whole(window):
    """Beside its 240 px bar the banner's words wrapped to seven lines in 97 px, widened the window to 915 px and
    cut off the tree's bottom; the status bar's progress ran 40 characters over its bar in two lines."""
    shown_at(window, 1366, 768)
    shown_at(window, 854, 585)
    message = "Loading SmolLM2-135M-Instruct: reading the weights from disk (first start converts them once)"
    window.status.loading(message, 0.4)
    shown_at(window, 854, 585)
    banner, tree, central = window.status.banner, window.panels.tree, window.centralWidget()
    assert window.width() == 854 and window.height() <= 700
    assert tree.height() >= 220 and tree.geometry().bottom() < central.height(), (tree.geometry(), central.size())
    assert banner.label.height() <= 2 * banner.label.fontMetrics().lineSpacing() + 2 and banner.toolTip() == message
    assert banner.bar.geometry().top() > banner.label.geometry().top()  # under the words, not beside them
    progress = window.status.progress
    shown = progress.text()
    assert shown.endswith("40%") and progress.fontMetrics().horizontalAdvance(shown) <= progress.width() - 8
    shown_at(window, 1366, 768)
    assert banner.label.text() == message and banner.toolTip() == ""  # wide: the words whole, the bar beside them
    assert abs(banner.bar.geometry().center().y() - banner.label.geometry().center().y()) <= 2


def test_the_sessions_tab_does_not_widen_the_smallest_window_and_its_buttons_show_their_words(window):
    shown_at(window, 1366, 768, dock="sessions")
    shown_at(window, 854, 585)
    assert window.width() == 854 and window.docks["sessions"].isVisible()
    for button in window.sessions.buttons.values():
        words = button.fontMetrics().horizontalAdvance(button.text())
        assert button.isVisible() and words + 8 <= button.width(), (button.text(), button.width())


@pytest.mark.parametrize("width", [800, 1000, 1366])
def test_the_prompts_bar_keeps_its_label_on_a_narrow_plot(qtbot, width):
    """Before, on a plot under ~210 px (all five in a row at 1366, three at 800) half a step was narrower than half
    of "prompt", and pyqtgraph dropped the label of the question's own traffic: a bar with no name under it."""
    stream = [dataclasses.replace(e, h2d_bytes=e.h2d_bytes + 3_000_000) if isinstance(e, ev.TransferStats) else e
              for e in fake_run("How fast?", SearchConfig(beams=2, width=2, max_steps=4))]
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.apply_many(stream)
    panel.flush()
    panel.show()
    panel.resize(width, 220)
    QApplication.processEvents()
    for name in ("traffic", "cumulative"):
        image = QImage(8, 8, QImage.Format.Format_ARGB32)
        painter = QPainter(image)
        _, _, texts = panel.plots[name].getAxis("bottom").generateDrawSpecs(painter)
        painter.end()
        assert [text for _, _, text in texts] == ["prompt", "1", "2", "3", "4"], (name, width)
