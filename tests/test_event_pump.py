"""The event pump keeps order and hands control back to the event loop between slices.

How long the loop waits under a burst is a figure for `benchmarks/bench_loop.py` (BENCHMARKS.md);
here only a bound no loaded machine reaches stands beside the counts that prove the slicing.
"""

from __future__ import annotations

import time

from app.gui.event_pump import EventPump
from app.gui.loop_monitor import LoopGapMonitor

SANITY_MS = 1000  # the whole burst is ~160 ms of work: a gap this long means no slicing at all


def busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def test_items_are_handled_in_order_in_slices_that_let_timers_run(qtbot):
    handled: list[tuple[int, int]] = []  # (item, timer ticks seen when it was handled)
    monitor = LoopGapMonitor()
    pump = EventPump(lambda item: (busy(4), handled.append((item, monitor.ticks))), budget_ms=8)
    monitor.start()
    for item in range(40):  # 160 ms of work arriving as one burst
        pump.push(item)
    qtbot.waitUntil(lambda: len(handled) == 40, timeout=5000)
    monitor.stop()
    assert [item for item, _ in handled] == list(range(40))
    per_pass: dict[int, int] = {}
    for _, ticks in handled:
        per_pass[ticks] = per_pass.get(ticks, 0) + 1
    # An item takes at least 4 ms and a pass stops starting items after 8 ms: at most 2 a pass,
    # however slow the machine; the timer ticked between passes.
    assert max(per_pass.values()) <= 2 and len(per_pass) >= 20
    assert monitor.largest_gap_ms < SANITY_MS


def test_flush_handles_everything_now(qtbot):
    handled: list[int] = []
    pump = EventPump(handled.append)
    for item in range(5):
        pump.push(item)
    pump.flush()
    assert handled == [0, 1, 2, 3, 4] and pump.pending == 0
