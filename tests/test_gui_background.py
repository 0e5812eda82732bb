"""Work run off the GUI thread hands its answer back only to a widget that still exists."""

from __future__ import annotations

import threading

import shiboken6
from PySide6.QtWidgets import QWidget

from app.gui.background import run_in_background


def test_an_answer_reaches_its_widget_and_one_for_a_widget_deleted_meanwhile_is_dropped(qtbot):
    got: list[str] = []
    release = threading.Event()
    gone, kept = QWidget(), QWidget()
    qtbot.addWidget(kept)
    for owner, name in ((gone, "gone"), (kept, "kept")):
        run_in_background(owner, "beamwise-test", lambda name=name: (release.wait(5), (name,))[1], got.append)
    shiboken6.delete(gone)  # a window closed while its plan was being made
    release.set()
    qtbot.waitUntil(lambda: "kept" in got, timeout=5000)
    qtbot.wait(100)  # time for the other answer, were it delivered
    assert got == ["kept"]
