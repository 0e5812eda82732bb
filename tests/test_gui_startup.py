"""Start-up: the main window paints before torch and transformers load, stays usable while they load in the
background, and closes cleanly in the middle of that import. Each start is `beamwise gui` in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from app.gui import engine_import
from app.gui.bridge import SearchBridge
from app.gui.main_window import MainWindow
from benchmarks.fake_search import fake_run
from tests.test_gui_window import small

ROOT = Path(__file__).resolve().parent.parent

# Who imports torch (and on which thread), and the first paint of any window; then `beamwise gui` as the command
# runs it (app.cli.exit_with at the end). What comes after the first paint is the start of WATCH_AFTER_PAINT.
PRELUDE = """
import json, os, sys, threading, time
from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QApplication

torch_thread = []
class WhoImportsTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not torch_thread:
            torch_thread.append(threading.current_thread().name)
        return None
sys.meta_path.insert(0, WhoImportsTorch())

def say(**fields):
    print(json.dumps(fields), flush=True)

class FirstPaint(QObject):
    def __init__(self):
        super().__init__()
        self.seen = False
    def eventFilter(self, obj, event):
        if not self.seen and event.type() == QEvent.Type.Paint and obj.isWidgetType() and obj.window().isVisible():
            self.seen = True
            heavy = [name for name in ("torch", "transformers", "pyqtgraph") if name in sys.modules]
            say(window=type(obj.window()).__name__, imported=heavy)
            QTimer.singleShot(0, lambda: after_paint(obj.window()))
        return False

app = QApplication(sys.argv[:1])
watch = FirstPaint()
app.installEventFilter(watch)
"""

FIRST_PAINT = PRELUDE + """
def after_paint(window):
    os._exit(0)
"""

# After the first paint: the event loop's largest gap until the engine is in, and what the GUI thread did meanwhile.
LOOP_DURING_IMPORT = PRELUDE + """
from app.gui import engine_import
from app.gui.loop_monitor import LoopGapMonitor

def after_paint(window):
    gaps = LoopGapMonitor(window)
    gaps.start()
    typed = []
    def poll():
        if engine_import.engine_ready():
            say(largest_gap_ms=gaps.largest_gap_ms, ticks=gaps.ticks, torch_thread=torch_thread, typed=typed,
                torch_in="torch" in sys.modules)
            os._exit(0)
        if "torch" in sys.modules and not typed:  # the import is under way: the question box takes typing
            window.question.insertPlainText("typed while torch loads")
            typed.append(window.question.toPlainText())
    timer = QTimer(window)
    timer.timeout.connect(poll)
    timer.start(5)
"""

# Close the window while torch is still importing: the process must end with the command's status, no abort.
CLOSE_DURING_IMPORT = PRELUDE + """
from app.gui import engine_import

def after_paint(window):
    def poll():
        if "torch" in sys.modules and not engine_import.engine_ready():
            say(closed_while_importing=True)
            timer.stop()
            window.close()
        elif engine_import.engine_ready():
            say(closed_while_importing=False)
            timer.stop()
            window.close()
    timer = QTimer(window)
    timer.timeout.connect(poll)
    timer.start(1)
"""

GUI = """
from app.cli import exit_with, main
exit_with(main(["gui", "--db", sys.argv[1], "--model", "synthetic:tiny-llama"]))
"""


def start_gui(tmp_path: Path, script: str, timeout: float = 240) -> tuple[list[dict], subprocess.CompletedProcess]:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "BEAMWISE_CONFIG_DIR": str(tmp_path / "config"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script + GUI, str(tmp_path / "s.db")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return lines, done


def test_the_first_paint_is_the_main_window_with_neither_torch_nor_transformers_imported(tmp_path):
    """Importing torch and transformers took ~4 s before the window (a splash showed meanwhile); pyqtgraph, for
    the charts, ~0.4 s more."""
    lines, done = start_gui(tmp_path, FIRST_PAINT)
    assert lines[:1] == [{"window": "MainWindow", "imported": []}], done.stderr[-2000:]


def test_torch_imports_in_the_background_while_the_event_loop_turns_and_the_window_takes_typing(tmp_path):
    """The GUI thread never imports torch: a worker does, and the window answers meanwhile. The gap bound is loose
    (2 shared cores); what is imported where is the exact part."""
    lines, done = start_gui(tmp_path, LOOP_DURING_IMPORT)
    assert len(lines) == 2, done.stderr[-2000:]
    report = lines[1]
    assert report["torch_in"] and report["torch_thread"] not in ([], ["MainThread"]), report
    assert report["typed"] and report["typed"][0].endswith("typed while torch loads"), report
    assert report["ticks"] > 50 and report["largest_gap_ms"] < 1500, report


def test_closing_the_window_while_torch_imports_exits_with_0(tmp_path):
    lines, done = start_gui(tmp_path, CLOSE_DURING_IMPORT)
    assert lines[1:] == [{"closed_while_importing": True}], (lines, done.stderr[-2000:])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "terminate called" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


CLOSE_AT_FIRST_PAINT = PRELUDE + """
def after_paint(window):
    say(closing=True)
    window.close()
"""


def test_a_window_closed_as_it_first_paints_ends_the_process(tmp_path):
    """A close that came while the window waited to be mapped and painted (paint_now) left the process running
    for ever with no window: app.exec() started after the last window had closed."""
    lines, done = start_gui(tmp_path, CLOSE_AT_FIRST_PAINT, timeout=60)
    assert lines[1:] == [{"closing": True}] and done.returncode == 0, (lines, done.stderr[-2000:])


@pytest.fixture
def broken_engine(monkeypatch):
    """An engine import that fails as a broken install does (a module that cannot be imported)."""
    monkeypatch.setattr(engine_import, "MODULES", ("beamwise_no_such_module_torch",))
    monkeypatch.setattr(engine_import, "_done", engine_import.threading.Event())
    monkeypatch.setattr(engine_import, "_failure", None)


def test_a_broken_torch_install_is_said_in_the_window_with_what_to_reinstall(qtbot, tmp_path, broken_engine,
                                                                             monkeypatch):
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QMessageBox

    shown: list[tuple[str, str]] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, title, text, *a: shown.append((title, text)))
    window = MainWindow(SearchBridge(), settings=QSettings(str(tmp_path / "w.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(window)
    window.show()
    window.import_engine()
    qtbot.waitUntil(lambda: "could not import" in window.models.folder_label.text(), timeout=10000)
    with qtbot.waitSignal(window.bridge.load_failed, timeout=10000):
        window.load_model()
    qtbot.waitUntil(lambda: bool(shown), timeout=5000)
    title, text = shown[-1]
    assert title == "Could not load the model"
    assert "could not import beamwise_no_such_module_torch (ModuleNotFoundError" in text
    assert "pip install --force-reinstall torch" in text and "Choose another model" not in text
    assert "Traceback" not in text
    window.close()


def test_the_models_list_read_when_the_engine_comes_in_waits_for_a_run_on(qtbot, make_window, monkeypatch):
    """Reading it (each model's config, ~70 ms) landed in a Run pressed during the import: a 150 ms gap."""
    release = threading.Event()

    def held_run(question, loaded, search, cache, *, should_stop):
        release.wait(10)
        yield from fake_run(question, search, cache, should_stop=should_stop)

    window = make_window(run=held_run)
    small(window)
    listed: list[bool] = []
    monkeypatch.setattr(window.models, "refresh", lambda: listed.append(window.running))
    with qtbot.waitSignal(window.run_ended, timeout=10000):
        assert window.start_run()
        window._on_engine_imported("")  # the import ends while the run is on
        qtbot.wait(50)
        assert listed == []
        release.set()
    assert listed == [False]
