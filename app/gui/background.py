"""Work that must not freeze the window, run in a daemon thread, its answer handed to the GUI thread."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, Signal, Slot


class _Relay(QObject):
    """Carries answers from worker threads to the GUI thread. Made once, on the GUI thread, and never deleted, so
    a worker always signals a live object. The answers wait in a Python queue and the signal carries nothing:
    no Python object (least of all a widget's bound signal) crosses Qt's event queue, where a widget deleted
    before delivery crashed the conversion of the event's arguments (a segmentation fault in two full test runs,
    when a closed window's plan arrived). Each answer is delivered only while its owner widget still exists."""

    ready = Signal()

    def __init__(self) -> None:
        super().__init__()
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        self.ready.connect(self._deliver)  # queued from workers: the relay lives on the GUI thread

    def post(self, owner: QObject, deliver: Callable[..., None], answer: tuple[Any, ...]) -> None:
        """From any thread."""
        self._answers.put((owner, deliver, answer))
        self.ready.emit()

    @Slot()
    def _deliver(self) -> None:
        while True:
            try:
                owner, deliver, answer = self._answers.get_nowait()
            except queue.Empty:
                return
            if shiboken6.isValid(owner):  # a widget closed while its work ran gets nothing
                deliver(*answer)


_RELAY: _Relay | None = None


def run_in_background(owner: QObject, name: str, work: Callable[[], tuple[Any, ...]],
                      deliver: Callable[..., None]) -> None:
    """Run `work` in a daemon thread and pass what it returns to `deliver` on the GUI thread, if `owner` (the
    widget asking) still exists then. Call it from the GUI thread; `work` turns its own failures into an answer."""
    global _RELAY
    if _RELAY is None:
        _RELAY = _Relay()
    relay = _RELAY
    threading.Thread(target=lambda: relay.post(owner, deliver, work()), name=name, daemon=True).start()
