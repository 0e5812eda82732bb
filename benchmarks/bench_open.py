"""Benchmark: open a recorded 10,000-candidate session in the window (read, replay, paint).

Run offscreen from a checkout: `QT_QPA_PLATFORM=offscreen python -m benchmarks.bench_open`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from app.gui.bridge import SearchBridge
from app.gui.main_window import MainWindow
from app.store import SessionStore
from benchmarks.bench_store import BIG, fake_events, timed_recording


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_open", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    with tempfile.TemporaryDirectory(prefix="beamwise-open-") as tmp:
        store = SessionStore(Path(tmp) / "big.db")
        _, _, session_id = timed_recording(fake_events(BIG), store)
        settings = QSettings(str(Path(tmp) / "beamwise.ini"), QSettings.Format.IniFormat)
        window = MainWindow(SearchBridge(), settings=settings, store=store, dialogs=False)
        window.resize(1400, 900)
        window.show()
        app.processEvents()
        times, reads = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            store.events(session_id)  # the reading part alone, for the breakdown
            reads.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            window.open_session(session_id)
            app.processEvents()
            window.grab()  # paint what the window now shows
            times.append((time.perf_counter() - start) * 1000)
        nodes = len(store.candidates(session_id))
        print(f"opening a {nodes:,}-candidate session in the window (read + replay + paint): "
              f"median {statistics.median(times):.0f} ms, best {min(times):.0f} ms over {args.repeats}; "
              f"reading the events alone: median {statistics.median(reads):.0f} ms")
        window.close()
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
