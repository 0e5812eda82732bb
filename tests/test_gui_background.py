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


def test_the_owner_and_the_work_are_let_go_on_the_gui_thread_never_on_the_workers(qtbot):
    """The worker's thread ends holding its work (and through it, often, the widget that asked): the GUI thread keeps
    them until that thread has ended, so a Qt object is never deleted on the worker's thread (PySide would delete
    it there, beside the GUI thread). Here the work's closure holds the last reference to its owner."""
    import time

    from PySide6.QtCore import QObject

    deleted_on_gui_thread: list[bool] = []
    owner = QObject()
    owner.destroyed.connect(lambda: deleted_on_gui_thread.append(threading.current_thread() is threading.main_thread()))
    got: list[str] = []
    run_in_background(owner, "beamwise-test", lambda held=owner: (time.sleep(0.05), (held.objectName() or "done",))[1],
                      got.append)  # fmt: skip
    del owner
    qtbot.waitUntil(lambda: got == ["done"] and bool(deleted_on_gui_thread), timeout=5000)
    assert deleted_on_gui_thread == [True]
