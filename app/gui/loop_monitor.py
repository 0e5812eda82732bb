"""Measures how long the GUI event loop goes without running: the largest gap between 1 ms timer ticks."""

from __future__ import annotations

from PySide6.QtCore import QElapsedTimer, QObject, QTimer


class LoopGapMonitor(QObject):
    """While running, `largest_gap_ms` is the longest time the event loop could not serve a timer."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = 1) -> None:
        super().__init__(parent)
        self._clock = QElapsedTimer()
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)
        self._last = 0
        self.largest_gap_ms = 0.0
        self.ticks = 0

    def start(self) -> None:
        self.largest_gap_ms, self.ticks = 0.0, 0
        self._clock.start()
        self._last = self._clock.nsecsElapsed()
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def _tick(self) -> None:
        now = self._clock.nsecsElapsed()
        self.largest_gap_ms = max(self.largest_gap_ms, (now - self._last) / 1e6)
        self._last = now
        self.ticks += 1
