"""The event-loop gap monitor sees a blocked GUI thread."""

from __future__ import annotations

import time

from app.gui.loop_monitor import LoopGapMonitor


def test_a_blocked_event_loop_shows_as_a_gap(qtbot):
    monitor = LoopGapMonitor()
    monitor.start()
    qtbot.waitUntil(lambda: monitor.ticks >= 5, timeout=2000)
    assert monitor.largest_gap_ms < 1000  # a sanity bound: quiet-machine figures belong to the benchmarks
    blocked_until = time.perf_counter() + 0.06
    while time.perf_counter() < blocked_until:  # the GUI thread busy for 60 ms: timers cannot fire
        pass
    ticks = monitor.ticks
    qtbot.waitUntil(lambda: monitor.ticks > ticks, timeout=2000)
    monitor.stop()
    assert monitor.largest_gap_ms >= 55
