"""The window on a high-DPI screen (a 4K monitor at 150 % or 200 %): lines as thick in logical pixels as at 100 %."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QApplication

from app.gui.charts import ChartsPanel

ROOT = Path(__file__).resolve().parent.parent
PEN_WIDTHS = """
import json
from PySide6.QtWidgets import QApplication
app = QApplication([])
from app.gui.charts import ChartsPanel
from tests.test_gui_high_dpi import pen_widths
panel = ChartsPanel()
panel.show()
app.processEvents()
print(json.dumps({"ratio": panel.canvas.devicePixelRatioF(), **pen_widths(panel)}))
"""


def pen_widths(panel: ChartsPanel) -> dict[str, float]:
    """The device-pixel widths of a solid and a dashed curve, the budget line and an axis (its grid's pen)."""
    return {"device": panel.curves["device"].opts["pen"].widthF(), "peak": panel.curves["peak"].opts["pen"].widthF(),
            "budget": panel.budget_line.pen.widthF(), "axis": panel.plots["device"].getAxis("left").pen().widthF()}


def test_at_200_percent_the_chart_lines_are_twice_as_many_device_pixels_wide():
    """pyqtgraph's pens are cosmetic, their width in device pixels: at 200 % a 2 px curve was 1 logical px and
    the axes and grid hairlines. The scale factor is fixed when QApplication starts, hence a process of its own."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", QT_SCALE_FACTOR="2",
               QT_SCALE_FACTOR_ROUNDING_POLICY="PassThrough", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", PEN_WIDTHS], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown == {"ratio": 2.0, "device": 4.0, "peak": 4.0, "budget": 3.0, "axis": 2.0}


def test_moved_to_a_screen_of_another_scale_the_chart_lines_follow(qtbot, monkeypatch):
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    assert pen_widths(panel) == {"device": 2.0, "peak": 2.0, "budget": 1.5, "axis": 1.0}
    monkeypatch.setattr(panel.canvas, "devicePixelRatioF", lambda: 1.5)  # the window went to a 150 % screen
    QApplication.sendEvent(panel.canvas, QEvent(QEvent.Type.DevicePixelRatioChange))
    assert pen_widths(panel) == {"device": 3.0, "peak": 3.0, "budget": 2.25, "axis": 1.5}
