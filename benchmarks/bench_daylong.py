"""A window left open all day: many questions in one window, and what grows from run to run.

Run offscreen: `QT_QPA_PLATFORM=offscreen python -m benchmarks.bench_daylong --runs 40`.
One window, the real bridge, engine and store (a scratch database and settings), a synthetic model and
small settings. The runs cycle through what a user does in a day: a plain run, a follow-up, a run
stopped mid-way, Run again, opening a past session, switching the model, exporting, New conversation,
and a right click on the Sessions list. After each, with a full collection first: the process's
resident memory, Python's tracked objects, threads, QObjects under the window, QObjects anywhere
(top-level widgets and their children), graphics items in the tree and the charts, open files, SQLite
connections, Sessions rows, transcript length, the database's size; each run's wall time and the
event loop's largest gap. It prints every sample and then each measure's growth per run over the second
half of the runs (the first runs warm caches). A measure that grows there without bound is a leak.

Counting QObjects makes Python wrappers for them, and a wrapper outlives a C++ object that Qt deletes
on its own (the status bar's message timer, a text document's frames): those would read as a Python
object leak, so the count is taken only with --count-qobjects, and then the objects count includes it.
"""

from __future__ import annotations

import argparse
import gc
import os
import sqlite3
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCENES = ("run", "follow-up", "stop", "run again", "open past", "switch model", "export", "new conversation",
          "right click")
MODELS = ("synthetic:tiny-llama", "synthetic:tiny-qwen2")


def open_files() -> int:
    """Open file descriptors (Linux), or the process's open files as psutil sees them elsewhere."""
    fd = Path("/proc/self/fd")
    if fd.is_dir():
        return len(list(fd.iterdir()))
    import psutil

    return len(psutil.Process().open_files())


def os_threads() -> int:
    """The process's threads as the OS counts them (Qt's and torch's too), where /proc says; else psutil's."""
    tasks = Path("/proc/self/task")
    if tasks.is_dir():
        return len(list(tasks.iterdir()))
    import psutil

    return psutil.Process().num_threads()


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


class Day:
    """One window over a scratch store, driven as a user would; `scene(i)` does the i-th step of the day."""

    def __init__(self, folder: Path, search: Any, count_qobjects: bool) -> None:
        from PySide6.QtCore import QSettings
        from PySide6.QtWidgets import QFileDialog

        from app.gui.bridge import SearchBridge
        from app.gui.loop_monitor import LoopGapMonitor
        from app.gui.main_window import MainWindow
        from app.store import SessionStore

        db = folder / "sessions.db"
        self.folder, self.search, self.db, self.count_qobjects = folder, search, db, count_qobjects
        self.store = SessionStore(db)
        self.bridge = SearchBridge(store_factory=lambda: SessionStore(db))
        settings = QSettings(str(folder / "beamwise.ini"), QSettings.Format.IniFormat)
        self.window = MainWindow(self.bridge, settings=settings, store=self.store, dialogs=False)
        self.window.resize(1400, 900)
        self.window.show()
        self.ended, self.terminal = 0, None  # a count, not a list: a list would keep every run's last event
        self.window.run_ended.connect(self._on_run_ended)
        self.monitor = LoopGapMonitor()
        self.exports = 0
        QFileDialog.getSaveFileName = staticmethod(self._save_name)  # the Export dialog answers at once
        self.model = MODELS[0]

    def _on_run_ended(self, terminal: Any) -> None:
        self.ended, self.terminal = self.ended + 1, terminal

    def _save_name(self, *args: Any) -> tuple[str, str]:
        self.exports += 1
        return str(self.folder / f"export-{self.exports}.md"), ""

    # ------------------------------------------------------------ driving

    def wait(self, done: Callable[[], bool], timeout_s: float = 300.0) -> None:
        """Run the event loop, sleeping between events as the window's own loop does, until `done()`. (With a
        time limit, processEvents does not wait for events but spins, and its spinning held the GIL from the
        engine's thread: runs took twice as long.)"""
        from PySide6.QtCore import QCoreApplication, QEventLoop, QTimer

        deadline = time.perf_counter() + timeout_s
        wake = QTimer()  # so the deadline is looked at even when nothing else happens
        wake.start(100)
        try:
            while not done():
                if time.perf_counter() > deadline:
                    raise TimeoutError("the window did not end the run in time")
                QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents)
        finally:
            wake.stop()
        QCoreApplication.processEvents()

    def configure(self) -> None:
        from engine.config import CacheConfig, ModelSpec

        cache = CacheConfig(prefix_cache=True)  # as a new user's window has it (app/gui/launch.py)
        self.window.controls.set_configs(ModelSpec(source=self.model), self.search, cache)

    def run(self, start: Callable[[], bool], question: str | None = None) -> Any:
        """Start a run with `start` (the window's own entry point) and wait for its end."""
        if question is not None:
            self.window.question.setPlainText(question)
        seen = self.ended
        if not start():
            raise RuntimeError(f"the run did not start: {self.window.statusBar().currentMessage()}")
        self.wait(lambda: self.ended > seen)
        terminal, self.terminal = self.terminal, None
        return terminal

    def stopped_run(self, question: str) -> Any:
        from engine import events as ev

        def stop_at_first_step(event: Any) -> None:
            if isinstance(event, ev.StepSelected):
                self.window.stop_action.trigger()

        self.window.bridge.event_emitted.connect(stop_at_first_step)
        try:
            return self.run(self.window.start_run, question)
        finally:
            self.window.bridge.event_emitted.disconnect(stop_at_first_step)

    def scene(self, i: int) -> tuple[str, Any]:
        """The i-th step of the day: its name and the run's terminal event."""
        w, name = self.window, SCENES[i % len(SCENES)]
        question = f"A train covers {60 + i} km in {1 + i % 3} hours. How fast is it?"
        last = w.current_session
        if name == "follow-up" and last is not None and w.talk.box.field.isEnabled():
            return name, self.run(lambda: (w.talk.ask(f"And in {i} hours?"), w.running)[1])
        if name == "stop":
            return name, self.stopped_run(question)
        if name == "run again" and last is not None:
            w.load_session_settings(last)
            return name, self.run(w.start_run)
        if name == "open past" and last is not None:
            w.open_session(max(1, last - 3))
        elif name == "switch model":
            self.model = MODELS[(MODELS.index(self.model) + 1) % len(MODELS)]
        elif name == "export" and last is not None:
            w.export_current()
        elif name == "new conversation":
            w.talk.new_conversation()
        elif name == "right click" and w.sessions is not None and w.sessions.model.rowCount():
            w.sessions.view.selectRow(0)
            w.sessions.context_menu()  # what a right click builds (not shown: it would wait for a choice)
        self.configure()
        return name, self.run(w.start_run, question)

    # ------------------------------------------------------------ measuring

    def sample(self) -> dict[str, float]:
        from PySide6.QtCore import QObject, QTimer
        from PySide6.QtWidgets import QApplication
        from torch import nn

        w = self.window
        gc.collect()
        tracked = gc.get_objects()
        warnings.simplefilter("ignore", FutureWarning)  # isinstance on torch's deprecated module attributes
        figures: dict[str, float] = {
            "rss_mb": rss_mb(), "py_objects": len(tracked), "threads": threading.active_count(),
            "os_threads": os_threads(), "open_files": open_files(),
            "sqlite": sum(isinstance(o, sqlite3.Connection) for o in tracked),
            "torch_modules": sum(isinstance(o, nn.Module) for o in tracked),
            "top_widgets": len(QApplication.topLevelWidgets()),
            "tree_items": len(w.panels.tree.scene().items()),
            "chart_items": sum(len(p.scene().items()) for p in w.panels.charts.plots.values() if p.scene()),
            "session_rows": w.sessions.model.rowCount() if w.sessions is not None else 0,
            "transcript_chars": len(w.panels.transcript.plain_text()),
            "db_kb": self.db.stat().st_size / 1024,
            "wal_kb": wal.stat().st_size / 1024 if (wal := self.db.with_name(self.db.name + "-wal")).exists() else 0,
        }
        del tracked
        if self.count_qobjects:
            figures["qobjects"] = len(w.findChildren(QObject))
            figures["qobjects_all"] = sum(len(t.findChildren(QObject)) + 1 for t in QApplication.topLevelWidgets())
            figures["qtimers"] = len(w.findChildren(QTimer))
        return figures

    def close(self) -> None:
        self.window.close()
        self.bridge.shutdown()
        self.store.close()


def slope(values: list[float]) -> float:
    """Least-squares growth per run."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    num = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values))
    return num / sum((x - mean_x) ** 2 for x in range(n))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--beams", type=int, default=2)
    parser.add_argument("--width", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--step-tokens", type=int, default=8)
    parser.add_argument("--count-qobjects", action="store_true", help="count QObjects (see the docstring)")
    parser.add_argument("--types", type=int, default=8, help="list this many Python types that grew the most")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="beamwise-daylong-"))
    os.environ["BEAMWISE_DATA_DIR"] = str(folder / "data")  # never the user's own models, sessions or caches
    os.environ["BEAMWISE_PREFIX_CACHE_DIR"] = str(folder / "prefix-kv")
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from engine.config import SearchConfig

    app = QApplication.instance() or QApplication(sys.argv[:1])  # noqa: F841 - kept alive
    search = SearchConfig(beams=args.beams, width=args.width, max_steps=args.steps, step_tokens=args.step_tokens)
    day = Day(folder, search, args.count_qobjects)
    samples: list[dict[str, float]] = []
    types: list[Counter] = []
    try:
        for i in range(args.runs):
            day.monitor.start()
            start, cpu = time.perf_counter(), time.process_time()
            name, terminal = day.scene(i)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            day.monitor.stop()
            figures = {"wall_s": wall, "cpu_s": cpu, "gap_ms": day.monitor.largest_gap_ms, **day.sample()}
            samples.append(figures)
            if i in (args.runs // 2, args.runs - 1):
                types.append(Counter(type(o).__name__ for o in gc.get_objects()))
            print(f"{i + 1:3d} {name:16s} {type(terminal).__name__:13s} "
                  + " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()),
                  flush=True)
    finally:
        day.close()
    report(samples, types, args.types)
    return 0


def report(samples: list[dict[str, float]], types: list[Counter], top: int) -> None:
    half = samples[len(samples) // 2:]
    print(f"\ngrowth per run over runs {len(samples) - len(half) + 1}-{len(samples)} (least squares), "
          "first and last value:")
    for key in samples[0]:
        values = [s[key] for s in half]
        print(f"  {key:16s} {slope(values):+10.2f}/run   {samples[0][key]:10.1f} -> {samples[-1][key]:10.1f}")
    if len(types) == 2:
        grown = sorted(((n - types[0][k], k) for k, n in types[1].items() if n != types[0][k]), reverse=True)[:top]
        runs = len(samples) - 1 - len(samples) // 2
        print(f"  Python types that grew most over the last {runs} runs: "
              + ", ".join(f"{k} {d:+d}" for d, k in grown))


if __name__ == "__main__":
    from app.cli import exit_with

    exit_with(main())
