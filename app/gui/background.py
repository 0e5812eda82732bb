"""Work that must not freeze the window, run in a daemon thread, its answer handed to the GUI thread."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, QTimer

POLL_MS = 20  # how often the GUI thread looks for finished work, only while some is running


class _Relay(QObject):
    """Hands answers from worker threads to the GUI thread without the workers touching Qt at all: a worker puts
    its answer in a Python queue, and a timer on the GUI thread, running only while work is out, takes it from
    there. (A signal emitted from a Python thread makes Qt adopt that thread; with the thread ending right after,
    full test runs crashed with a segmentation fault as the GUI thread entered the slot, three times in about
    fifteen runs, whatever the signal carried.) An answer goes only to an owner widget that still exists."""

    def __init__(self) -> None:
        super().__init__()
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        self._out = 0  # work started and not yet delivered
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._deliver)

    def start(self, owner: QObject, name: str, work: Callable[[], tuple[Any, ...]],
              deliver: Callable[..., None]) -> None:
        def body() -> None:
            try:
                answer = work()
            except BaseException:
                self._answers.put((owner, None, ()))  # counted as delivered; `work` should have said it in its answer
                raise
            self._answers.put((owner, deliver, answer))

        self._out += 1
        self._timer.start()
        threading.Thread(target=body, name=name, daemon=True).start()

    def _deliver(self) -> None:
        while True:
            try:
                owner, deliver, answer = self._answers.get_nowait()
            except queue.Empty:
                break
            self._out -= 1
            if deliver is not None and shiboken6.isValid(owner):  # a widget closed meanwhile gets nothing
                deliver(*answer)
        if self._out == 0:
            self._timer.stop()


_RELAY: _Relay | None = None


def run_in_background(owner: QObject, name: str, work: Callable[[], tuple[Any, ...]],
                      deliver: Callable[..., None]) -> None:
    """Run `work` in a daemon thread and pass what it returns to `deliver` on the GUI thread, if `owner` (the
    widget asking) still exists then. Call it from the GUI thread; `work` turns its own failures into an answer."""
    global _RELAY
    if _RELAY is None:
        _RELAY = _Relay()
    _RELAY.start(owner, name, work, deliver)
