"""The event pump keeps order and hands control back to the event loop between slices."""

from __future__ import annotations

import time

from app.gui.event_pump import EventPump
from app.gui.loop_monitor import LoopGapMonitor


def busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def test_items_are_handled_in_order_in_slices_that_let_timers_run(qtbot):
    handled: list[int] = []
    pump = EventPump(lambda item: (busy(4), handled.append(item)), budget_ms=8)
    monitor = LoopGapMonitor()
    monitor.start()
    for item in range(40):  # 160 ms of work arriving as one burst
        pump.push(item)
    qtbot.waitUntil(lambda: len(handled) == 40, timeout=5000)
    monitor.stop()
    assert handled == list(range(40))
    assert monitor.ticks >= 10  # the timer ran between slices
    assert monitor.largest_gap_ms < 60  # no pass held the loop for the whole burst


def test_flush_handles_everything_now(qtbot):
    handled: list[int] = []
    pump = EventPump(handled.append)
    for item in range(5):
        pump.push(item)
    pump.flush()
    assert handled == [0, 1, 2, 3, 4] and pump.pending == 0
