"""Benchmark of the whole window on a wide, long search and a big store: loop gap, GUI time, interactions.

Run offscreen: `QT_QPA_PLATFORM=offscreen python -m benchmarks.bench_window --beams 16 --width 4 --steps 30`.
The fake engine's stream (no model) goes through the window's own path (bridge signal, event pump,
session model, every panel) one step at a time, the event loop running until the step is drawn, while
a 1 ms timer measures the loop's largest gap. Garbage-collector pauses are counted apart: a full
collection walks every object Python tracks (torch, transformers and Qt wrappers, ~400,000), so it can
hold the window longer than anything the panels do. Then the session is opened from the store as the
Sessions tab does, collapsed, fitted, walked with the arrow keys and exported; and `--sessions` more
sessions are recorded to time the Sessions tab's listing, its search box key by key and opening one.
Wall-clock figures on a shared machine vary: compare runs made one after the other.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent, QEventLoop, QSettings, Qt
from PySide6.QtWidgets import QApplication

from app.cli import exit_with
from app.export import export_session
from app.gui.bridge import SearchBridge
from app.gui.loop_monitor import LoopGapMonitor
from app.gui.main_window import MainWindow
from app.store import SessionStore
from benchmarks.bench_store import timed_recording
from benchmarks.bench_tree import _split_steps
from benchmarks.fake_search import fake_run
from engine.config import SearchConfig

QUESTION = "What is 12 times 7?"


class GcPauses:
    """The collector's pauses while installed: how many full (generation 2) collections, and the longest."""

    def __init__(self) -> None:
        self.full, self.longest_ms, self._start = 0, 0.0, 0.0

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        self.longest_ms = max(self.longest_ms, (time.perf_counter() - self._start) * 1000)
        self.full += info["generation"] == 2


def _idle(window: MainWindow, timeout_s: float = 60.0) -> None:
    """Run the event loop until the pump is empty and every chart is drawn."""
    deadline = time.perf_counter() + timeout_s
    while window._pump.pending or window.panels.charts.pending:
        if time.perf_counter() > deadline:
            raise TimeoutError("the window did not draw the step in time")
        QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents)  # the timers wake it
    QCoreApplication.processEvents()


def _timed_ms(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def live_run(window: MainWindow, search: SearchConfig) -> dict[str, Any]:
    """Feed the fake run step by step as the bridge would; the loop gap, GUI CPU time and slowest events."""
    head, steps, tail = _split_steps(list(fake_run(QUESTION, search)))
    slowest: dict[str, float] = defaultdict(float)
    apply = window.apply_event

    def timed_apply(event: Any) -> None:
        slowest[type(event).__name__] = max(slowest[type(event).__name__], _timed_ms(lambda: apply(event)))

    window.apply_event = timed_apply  # the pump calls it for every event
    window._begin(search)
    monitor, cpu, wall = LoopGapMonitor(), time.thread_time(), time.perf_counter()
    with GcPauses() as pauses:
        monitor.start()
        for chunk in [head, *steps, tail]:
            for event in chunk:
                window.bridge.event_emitted.emit(event)
            _idle(window)
        monitor.stop()
    del window.apply_event
    window.bridge.run_finished.emit()  # the run's end as the bridge says it (the window thaws what its start froze)
    _idle(window)
    return {"nodes": len(window.panels.tree.data.nodes), "events": len(head) + sum(map(len, steps)) + len(tail),
            "wall_s": time.perf_counter() - wall, "cpu_s": time.thread_time() - cpu, "gap_ms": monitor.largest_gap_ms,
            "gc_full": pauses.full, "gc_longest_ms": pauses.longest_ms, "slowest": dict(slowest)}


def interactions(window: MainWindow, store: SessionStore, session_id: int, folder: Path) -> dict[str, float]:
    """After a run: open it from the store, Collapse pruned (on, off), Fit, 40 arrow keys, export as Markdown."""
    tree = window.panels.tree
    figures = {"open_ms": _timed_ms(lambda: (window.open_session(session_id), _idle(window), window.grab()))}
    figures["collapse_ms"] = _timed_ms(lambda: (tree.set_collapse_pruned(True), tree.viewport().grab()))
    figures["expand_ms"] = _timed_ms(lambda: (tree.set_collapse_pruned(False), tree.viewport().grab()))
    figures["fit_ms"] = _timed_ms(lambda: (tree.fit_to_view(), tree.viewport().grab()))
    keys = [Qt.Key.Key_Left] * 10 + [Qt.Key.Key_Up] * 10 + [Qt.Key.Key_Right] * 10 + [Qt.Key.Key_Down] * 10
    with GcPauses() as pauses:
        moves = [_timed_ms(lambda k=k: (tree.move_selection(k), QCoreApplication.processEvents())) for k in keys]
    figures["arrow_max_ms"], figures["arrow_mean_ms"] = max(moves), sum(moves) / len(moves)
    figures["arrow_gc_ms"] = pauses.longest_ms
    figures["export_ms"] = _timed_ms(lambda: export_session(store, session_id, "md", folder / "big.md"))
    return figures


def sessions_tab(window: MainWindow, store: SessionStore, count: int) -> dict[str, float]:
    """Record `count` small sessions, then time the Sessions tab: listing, typing a search, opening the first."""
    small = list(fake_run(QUESTION, SearchConfig(beams=2, width=2, max_steps=3, seed=1)))
    for _ in range(count):
        timed_recording(small, store)
    panel, queries = window.sessions, []
    calls = store.query

    def counted(*args: Any, **kwargs: Any) -> list[dict]:
        queries.append(args[0])
        return calls(*args, **kwargs)

    store.query = counted
    figures = {"list_ms": _timed_ms(panel.refresh), "listed": panel.model.rowCount()}
    queries.clear()
    keys = [_timed_ms(lambda n=n: (panel.search.setText(QUESTION[:n]), QCoreApplication.processEvents()))
            for n in range(1, len(QUESTION) + 1)]
    figures.update(key_max_ms=max(keys), key_mean_ms=sum(keys) / len(keys), queries_per_key=len(queries) / len(keys))
    figures["search_ms"] = _timed_ms(panel.refresh)  # what the pause after typing runs, once
    _idle(window)
    del store.query
    panel.view.selectRow(0)
    figures["open_ms"] = _timed_ms(lambda: (window.open_session(panel.selected_id()), _idle(window), window.grab()))
    return figures


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_window", description=__doc__.splitlines()[0])
    parser.add_argument("--beams", type=int, default=16, help="kept beams N (default 16)")
    parser.add_argument("--width", type=int, default=4, help="children per beam M (default 4)")
    parser.add_argument("--steps", type=int, default=30, help="steps of the search (default 30)")
    parser.add_argument("--collapse", action="store_true", help="Collapse pruned on during the live run")
    parser.add_argument("--sessions", type=int, default=1000, help="sessions in the store for the Sessions tab "
                                                                   "(default 1000; 0 skips that part)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    search = SearchConfig(beams=args.beams, width=args.width, max_steps=args.steps, seed=1)
    with tempfile.TemporaryDirectory(prefix="beamwise-window-") as tmp:
        folder = Path(tmp)
        store = SessionStore(folder / "sessions.db")
        settings = QSettings(str(folder / "beamwise.ini"), QSettings.Format.IniFormat)
        window = MainWindow(SearchBridge(), settings=settings, store=store, dialogs=False)
        window.resize(1400, 900)
        window.show()
        app.processEvents()
        window.panels.tree.set_collapse_pruned(args.collapse)
        run = live_run(window, search)
        slow = ", ".join(f"{name} {ms:.1f}" for name, ms in sorted(run["slowest"].items(), key=lambda kv: -kv[1])[:4])
        collapsed = ", pruned collapsed" if args.collapse else ""
        print(f"live {args.beams}x{args.width}x{args.steps}{collapsed}: {run['nodes']} nodes, {run['events']} events "
              f"in {run['wall_s']:.2f} s (GUI thread CPU {run['cpu_s']:.2f} s); "
              f"largest loop gap {run['gap_ms']:.1f} ms; "
              f"full gc collections {run['gc_full']}, longest gc pause {run['gc_longest_ms']:.1f} ms")
        print(f"  slowest single event (ms): {slow}")
        _, _, session_id = timed_recording(fake_run(QUESTION, search), store)
        after = interactions(window, store, session_id, folder)
        print("after the run (ms): " + ", ".join(f"{k.removesuffix('_ms')} {v:.1f}" for k, v in after.items()))
        if args.sessions:
            tab = sessions_tab(window, store, args.sessions)
            print(f"Sessions tab, {args.sessions + 1} sessions ({tab['listed']} listed): list {tab['list_ms']:.1f} ms; "
                  f"search box per key mean {tab['key_mean_ms']:.1f} ms, max {tab['key_max_ms']:.1f} ms, "
                  f"{tab['queries_per_key']:.1f} queries per key, the search once typing pauses "
                  f"{tab['search_ms']:.1f} ms; "
                  f"open one {tab['open_ms']:.1f} ms")
        window.close()
        store.close()
        window.deleteLater()  # as the app's own exit does: its widgets go before the QApplication, not after
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    return 0


if __name__ == "__main__":
    exit_with(main())  # the plan bar may still be planning: see app.cli.exit_with
