"""Start-up: something paints before torch and transformers load, and says what is loading until the window shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from app.cli import build_parser
from app.gui import launch
from app.gui import settings as saved
from app.gui.splash import StartupSplash

ROOT = Path(__file__).resolve().parent.parent

# `beamwise gui` in a fresh process; at the first paint of any window: which window, and what was imported.
FIRST_PAINT = """
import json, os, sys
from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QApplication

class FirstPaint(QObject):
    def eventFilter(self, obj, event):
        if event.type() == QEvent.Type.Paint and obj.isWidgetType() and obj.window().isVisible():
            heavy = [name for name in ("torch", "transformers", "pyqtgraph") if name in sys.modules]
            print(json.dumps({"window": type(obj.window()).__name__, "imported": heavy}), flush=True)
            os._exit(0)
        return False

app = QApplication(sys.argv[:1])
watch = FirstPaint()
app.installEventFilter(watch)
from app.cli import main
main(["gui", "--db", sys.argv[1], "--model", "synthetic:tiny-llama"])
print(json.dumps({"window": None}), flush=True)
"""


def test_the_first_paint_comes_before_torch_transformers_and_the_charts_load(tmp_path):
    """Importing the window took ~4 s (torch, transformers, pyqtgraph) and nothing showed until then."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", FIRST_PAINT, str(tmp_path / "s.db")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    first = json.loads(done.stdout.strip().splitlines()[-1])
    assert first == {"window": "StartupSplash", "imported": []}, done.stderr[-2000:]


def test_the_splash_paints_each_line_before_returning(qtbot):
    splash = StartupSplash()
    qtbot.addWidget(splash)
    assert splash.isVisible() and splash.paints >= 1
    painted = splash.paints
    splash.say("Loading PyTorch and transformers…")
    assert splash.message == "Loading PyTorch and transformers…" and splash.paints == painted + 1
    splash.finish()
    assert not splash.isVisible()


def test_launch_says_each_slow_part_and_closes_the_splash_when_the_window_shows(qtbot, tmp_path, monkeypatch):
    seen: dict[str, object] = {"said": []}

    class Recording(StartupSplash):
        def say(self, text: str) -> None:
            seen["said"].append(text)
            super().say(text)

        def finish(self) -> None:
            seen["window_visible_at_finish"] = any(type(w).__name__ == "MainWindow" and w.isVisible()
                                                   for w in QApplication.topLevelWidgets())
            super().finish()

    def exit_when_loaded() -> None:
        seen["splash_closed"] = not any(isinstance(w, StartupSplash) and w.isVisible()
                                        for w in QApplication.topLevelWidgets())
        QApplication.instance().exit(0)

    build = launch._build_window

    def build_and_watch(*args, **kwargs):
        window = build(*args, **kwargs)
        window.bridge.model_loaded.connect(lambda *_: exit_when_loaded())
        return window

    qsettings = QSettings(str(tmp_path / "beamwise.ini"), QSettings.Format.IniFormat)
    monkeypatch.setattr(saved, "default_settings", lambda: qsettings)  # never the user's settings
    monkeypatch.setattr(launch, "StartupSplash", Recording)
    monkeypatch.setattr(launch, "_build_window", build_and_watch)

    args = build_parser().parse_args(["gui", "--db", str(tmp_path / "s.db"), "--model", "synthetic:tiny-llama"])
    assert launch.main(args) == 0
    assert seen["said"] == ["Loading PyTorch and transformers…", "Building the window…"]
    assert seen["window_visible_at_finish"] and seen["splash_closed"]
