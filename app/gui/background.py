"""Work that must not freeze the window, run in a daemon thread, its answer handed to the GUI thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, QTimer

POLL_MS = 20  # how often the GUI thread looks for finished work, only while some is running


class _Relay(QObject):
    """Hands answers from worker threads to the GUI thread without the workers touching Qt at all: a worker keeps
    its answer in a box, and a timer on the GUI thread, running only while work is out, takes it from there once
    the worker's thread has ended. (A signal emitted from a Python thread makes Qt adopt that thread; with the
    thread ending right after, full test runs crashed with a segmentation fault as the GUI thread entered the slot,
    three times in about fifteen runs, whatever the signal carried.) The GUI thread holds the owner, the work and
    the delivery until then, so the worker never drops the last reference to a Qt object (a QObject whose last
    reference goes on a plain Python thread is deleted there). An answer goes only to an owner that still exists."""

    def __init__(self) -> None:
        super().__init__()
        self._pending: list[tuple[threading.Thread, QObject, Callable[[], tuple[Any, ...]], Callable[..., None],
                                  list[tuple[Any, ...]]]] = []  # fmt: skip
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._deliver)

    def start(self, owner: QObject, name: str, work: Callable[[], tuple[Any, ...]],
              deliver: Callable[..., None]) -> None:
        box: list[tuple[Any, ...]] = []  # the answer, once `work` returns (empty if it raised)

        def body() -> None:
            box.append(work())

        thread = threading.Thread(target=body, name=name, daemon=True)
        self._pending.append((thread, owner, work, deliver, box))
        self._timer.start()
        thread.start()

    @property
    def pending(self) -> int:
        """Work started and not yet handed on (its thread still running, or its answer not yet delivered)."""
        return len(self._pending)

    def _deliver(self) -> None:
        running = []
        for item in self._pending:
            thread, owner, _work, deliver, box = item
            if thread.is_alive():
                running.append(item)
            elif box and shiboken6.isValid(owner):  # a widget closed meanwhile gets nothing
                deliver(*box[0])
        self._pending = running
        if not running:
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
