"""The charts and the transcript at the window's common sizes: step axes whole with a verifier's longer key, the
tree's share of a short window, rows that scroll whole, the transcript's hint at first show, bars that stay
visible on a long run, and no y ticks before any data."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, QPointF, QRect, QSettings, Qt
from PySide6.QtGui import QImage, QPainter, QWheelEvent
from PySide6.QtWidgets import QApplication

from app.gui.bridge import SearchBridge
from app.gui.charts import TITLES, ChartsPanel
from app.gui.main_window import MainWindow
from app.gui.transcript import PLACEHOLDERS
from benchmarks.fake_search import fake_run
from engine.config import SearchConfig
from tests.test_gui_bridge import CountingLoader, run_fake
from tests.test_gui_small_screens import longest_titles_run


@pytest.fixture
def window(keep_window, tmp_path: Path) -> MainWindow:
    settings = QSettings(str(tmp_path / "beamwise.ini"), QSettings.Format.IniFormat)
    bridge = SearchBridge(loader=CountingLoader(), run=run_fake)
    return keep_window(MainWindow(bridge, settings=settings, dialogs=False))


def opened_at(window: MainWindow, width: int, height: int) -> None:
    """As the app opens it: resized, then shown (the transcript had not its final width before the show)."""
    window.resize(width, height)
    window.show()
    for _ in range(4):
        QApplication.processEvents()


def with_run(window: MainWindow) -> ChartsPanel:
    charts = window.panels.charts
    charts.build()
    charts.apply_many(longest_titles_run())
    charts.flush()
    for _ in range(4):
        QApplication.processEvents()
    return charts


def on_screen(charts: ChartsPanel, item) -> QRect:
    """`item`'s rectangle in the scroll area's viewport (what the panel shows is that viewport's rect)."""
    scene = item.mapRectToScene(item.boundingRect())
    view = charts.canvas.mapFromScene(scene).boundingRect()
    top_left = charts.canvas.viewport().mapTo(charts.scroll.viewport(), view.topLeft())
    return QRect(top_left, view.size())


@pytest.mark.parametrize("size", [(1400, 900), (1280, 720)])
def test_a_verifiers_key_leaves_every_step_axis_whole(window, size):
    """With a verifier's KV share the device key took two more lines, the row outgrew the dock, a scroll bar came
    and each plot's "step" label was cut in half (1400x900) or gone (1280x720)."""
    opened_at(window, *size)
    charts = with_run(window)
    assert charts.columns == len(TITLES)
    shown = charts.scroll.viewport().rect()
    assert charts.scroll.verticalScrollBar().maximum() == 0
    for name, plot in charts.plots.items():
        label = plot.getAxis("bottom").label
        margin = int(label.document().documentMargin())  # the text item's padding around its glyphs
        glyphs = on_screen(charts, label).adjusted(margin, margin, -margin, -margin)
        assert shown.contains(glyphs), (name, glyphs, shown)
        assert plot.vb.height() >= 60, name


def test_a_short_window_leaves_the_tree_most_of_its_height_and_rows_scroll_whole(window):
    """At 1024x640 the charts' dock kept 220 px and the tree got 190; the second row's titles showed cut in
    half under the first row."""
    opened_at(window, 1024, 640)
    charts = with_run(window)
    tree, dock = window.panels.tree, window.docks["charts"]
    assert tree.height() >= 1.8 * dock.height(), (tree.height(), dock.height())
    bar = charts.scroll.verticalScrollBar()
    assert charts.columns < len(TITLES) and bar.maximum() > 0
    viewport = charts.canvas.viewport()
    for _ in range(3):  # a wheel notch at a time, row after row
        shown = charts.scroll.viewport().rect()
        for name, plot in charts.plots.items():
            title = on_screen(charts, plot.titleLabel.item)
            assert shown.contains(title) or not shown.intersects(title), (name, bar.value(), title, shown)
        at = QPointF(100, 60)
        wheel = QWheelEvent(at, viewport.mapToGlobal(at), QPoint(0, 0), QPoint(0, -120), Qt.MouseButton.NoButton,
                            Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
        QApplication.sendEvent(viewport, wheel)
        QApplication.processEvents()
    assert bar.value() > 0


def test_the_transcripts_hint_fits_when_the_window_opens_narrow(window):
    """Opened at 1024 px the hint was picked for the viewport's size before the show: "The best path so far shows
    here during a" (cut); after a resize the short wording was right."""
    opened_at(window, 1024, 640)
    view = window.panels.transcript.view
    hint = view.placeholderText()
    assert hint in PLACEHOLDERS
    room = view.viewport().width() - 2 * int(view.document().documentMargin())
    assert view.fontMetrics().horizontalAdvance(hint) <= room, (hint, room)


def test_bars_stay_a_few_pixels_wide_on_a_long_run(qtbot):
    """At 250 steps a 0.38-step bar was under a pixel wide: the prompt's 100 kB bar did not show."""
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.apply_many(fake_run("How fast?", SearchConfig(beams=1, width=1, max_steps=250)))
    panel.flush()
    panel.show()
    panel.resize(1000, 220)
    for _ in range(4):
        QApplication.processEvents()
    for name, bars in (("traffic", ("step_h2d", "step_d2h")), ("stall", ("stall",))):
        pixel = panel.plots[name].vb.viewPixelSize()[0]
        for key in bars:
            assert panel.curves[key].opts["width"] / pixel >= 2, (key, panel.curves[key].opts["width"], pixel)


def y_tick_texts(panel: ChartsPanel, name: str) -> list[str]:
    image = QImage(8, 8, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    _, _, texts = panel.plots[name].getAxis("left").generateDrawSpecs(painter)
    painter.end()
    return [text for _, _, text in texts]


def test_no_time_ticks_before_any_step(qtbot):
    """Before a run the time plot showed 200 … 800 ms over nothing; it shows ticks once it has steps."""
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.resize(1366, 220)
    QApplication.processEvents()
    assert y_tick_texts(panel, "copy") == [] and y_tick_texts(panel, "device") == []
    panel.apply_many(fake_run("How fast?", SearchConfig(beams=2, width=2, max_steps=3)))
    panel.flush()
    QApplication.processEvents()
    assert any(text.endswith("s") for text in y_tick_texts(panel, "copy"))


def test_a_restored_windows_charts_dock_keeps_the_height_the_user_left(keep_window, tmp_path: Path):
    """Sizing the charts' dock at the first show is for a window with nothing saved: a restored one keeps its docks."""
    from app.gui import settings as saved

    path = str(tmp_path / "beamwise.ini")
    first = keep_window(MainWindow(SearchBridge(loader=CountingLoader(), run=run_fake), dialogs=False,
                                   settings=QSettings(path, QSettings.Format.IniFormat)))
    opened_at(first, 1400, 900)
    first.resizeDocks([first.docks["charts"]], [330], Qt.Orientation.Vertical)
    QApplication.processEvents()
    left = first.docks["charts"].height()
    assert left > 300
    saved.save_window(first.settings, first)
    first.settings.sync()
    again = keep_window(MainWindow(SearchBridge(loader=CountingLoader(), run=run_fake), dialogs=False,
                                   settings=QSettings(path, QSettings.Format.IniFormat)))
    opened_at(again, 1400, 900)
    assert abs(again.docks["charts"].height() - left) <= 4
