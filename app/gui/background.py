"""Work that must not freeze the window, run in a daemon thread, its answer handed to the GUI thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot


class _Relay(QObject):
    """Carries answers from worker threads to the GUI thread. It is made once, on the GUI thread, and never
    deleted, so a worker always emits on a live object; the widget the answer is for is asked on the GUI thread,
    where it cannot be deleted in the middle of the call. (Emitting a closed widget's own signal from a worker
    raced its deletion: a rare segmentation fault.)"""

    answered = Signal(object, object)  # deliver, the answer's arguments

    def __init__(self) -> None:
        super().__init__()
        self.answered.connect(self.deliver)  # queued: the relay lives on the GUI thread

    @Slot(object, object)
    def deliver(self, deliver: Callable[..., None], answer: tuple[Any, ...]) -> None:
        try:
            deliver(*answer)
        except RuntimeError:  # the widget was deleted while the work ran
            pass


_RELAY: _Relay | None = None


def run_in_background(name: str, work: Callable[[], tuple[Any, ...]], deliver: Callable[..., None]) -> None:
    """Run `work` in a daemon thread and pass what it returns to `deliver` (a Qt signal's `emit`) on the GUI
    thread. Call it from the GUI thread. `work` turns its own failures into an answer; an answer that arrives
    after its widget closed is dropped."""
    global _RELAY
    if _RELAY is None:
        _RELAY = _Relay()
    relay = _RELAY

    def body() -> None:
        relay.answered.emit(deliver, work())

    threading.Thread(target=body, name=name, daemon=True).start()
