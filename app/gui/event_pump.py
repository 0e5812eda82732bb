"""Feeds queued engine events to the window a slice at a time, so the event loop never waits long.

A step arrives as a burst of dozens of queued signals; handled in one go they would keep
input, timers and painting waiting for the whole burst. The pump handles items in order
for at most `budget_ms`, then yields to the event loop and continues on the next pass.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QTimer


class EventPump(QObject):
    def __init__(self, handle: Callable[[Any], None], budget_ms: float = 8.0, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._handle = handle
        self._budget = budget_ms / 1000
        self._queue: deque[Any] = deque()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(0)
        self._timer.timeout.connect(self._drain)

    @property
    def pending(self) -> int:
        return len(self._queue)

    def push(self, item: Any) -> None:
        """Queue `item`; it is handled after every item pushed before it."""
        self._queue.append(item)
        if not self._timer.isActive():
            self._timer.start()

    def flush(self) -> None:
        """Handle everything queued now (shutdown, replay)."""
        self._timer.stop()
        while self._queue:
            self._handle(self._queue.popleft())

    def _drain(self) -> None:
        deadline = time.perf_counter() + self._budget
        while self._queue and time.perf_counter() < deadline:
            self._handle(self._queue.popleft())
        if self._queue:
            self._timer.start()
