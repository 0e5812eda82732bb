"""How soon the window shows something, as a user double-clicking the app sees it: each start of `beamwise gui` in
a fresh process and a fresh settings folder (on Windows the window's settings live in the registry: the user's
own are read), timed from the moment the process is asked for, to the first paint of any window, the first paint
of the main window, and the model ready. Also the process's CPU time at the main window's first paint (what a
busy machine stretches less than the wall time) and the event loop's largest gap from then until the model is
ready (torch and the model load in the background meanwhile). Offscreen, like the tests.

    QT_QPA_PLATFORM=offscreen python -m benchmarks.startup --runs 3 [--model synthetic:tiny-llama]

Windows: `set QT_QPA_PLATFORM=offscreen` then `.venv\\Scripts\\python -m benchmarks.startup --runs 3`.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

CHILD = """
import os, sys, time
START = float(os.environ["BEAMWISE_STARTUP_T0"])
marks = {}
def ms():
    return round((time.time() - START) * 1000)
import PySide6.QtWidgets as widgets
from PySide6.QtCore import QEvent, QObject, QTimer

class Watch(QObject):
    def eventFilter(self, obj, event):
        if event.type() == QEvent.Type.Paint and obj.isWidgetType() and obj.window().isVisible():
            marks.setdefault("first_paint_ms", ms())
            marks.setdefault("first_painted", type(obj.window()).__name__)
            marks.setdefault("torch_imported_then", "torch" in sys.modules)
            if type(obj.window()).__name__ == "MainWindow" and "window_paint_ms" not in marks:
                marks["window_paint_ms"] = ms()
                marks["window_cpu_ms"] = round(time.process_time() * 1000)
                QTimer.singleShot(0, gaps.start)
        return False

class Gaps(QObject):  # the event loop's largest gap between 1 ms timer ticks, from the main window's first paint on
    def start(self):
        self.last, self.timer = time.perf_counter(), QTimer()
        marks["gap_ms"] = 0
        self.timer.timeout.connect(self.tick)
        self.timer.start(1)
    def tick(self):
        now = time.perf_counter()
        marks["gap_ms"] = max(marks["gap_ms"], round((now - self.last) * 1000))
        self.last = now

gaps = Gaps()

class App(widgets.QApplication):
    def __init__(self, *args):
        super().__init__(*args)
        self.watch, self.poll = Watch(), QTimer()
        self.installEventFilter(self.watch)
        self.poll.timeout.connect(self.hook)
        self.poll.start(5)

    def hook(self):
        bridge = next((w.bridge for w in self.topLevelWidgets() if hasattr(w, "bridge")), None)
        if bridge is not None:
            self.poll.stop()
            bridge.model_loaded.connect(lambda *_: (marks.setdefault("ready_ms", ms()), self.exit(0)))
            bridge.load_failed.connect(lambda message: (marks.setdefault("failed", message), self.exit(3)))

widgets.QApplication = App
from app.cli import main
main(sys.argv[1:])
print("MARKS", marks, flush=True)
os._exit(0)
"""


def one_start(argv: list[str]) -> dict:
    """One start of `beamwise gui ARGV` in a fresh process and settings folder: its marks in ms from the ask."""
    with tempfile.TemporaryDirectory(prefix="beamwise-startup-") as folder:
        env = {**os.environ, "BEAMWISE_CONFIG_DIR": folder, "XDG_CONFIG_HOME": folder, "APPDATA": folder,
               "BEAMWISE_STARTUP_T0": repr(time.time())}
        done = subprocess.run([sys.executable, "-c", CHILD, "gui", "--db", os.path.join(folder, "s.db"), *argv],
                              capture_output=True, text=True, env=env, timeout=600)
    line = next((line for line in done.stdout.splitlines() if line.startswith("MARKS ")), None)
    if line is None:
        raise SystemExit(f"the start printed no marks:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return ast.literal_eval(line.removeprefix("MARKS "))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="starts, each in a fresh process (default 3)")
    parser.add_argument("--model", default="bundled", help="the model the window loads (default bundled)")
    args = parser.parse_args(argv)
    for run in range(1, args.runs + 1):
        marks = one_start(["--model", args.model])
        torch = "torch imported" if marks.get("torch_imported_then") else "torch not yet imported"
        print(f"start {run}: first paint {marks.get('first_paint_ms')} ms ({marks.get('first_painted')}, {torch}); "
              f"main window painted {marks.get('window_paint_ms')} ms (CPU {marks.get('window_cpu_ms')} ms); "
              f"model ready {marks.get('ready_ms')} ms; largest loop gap meanwhile {marks.get('gap_ms')} ms"
              + (f"; load failed: {marks['failed']}" if "failed" in marks else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
