"""`gui --panel sessions --screenshot` when the Sessions tab is not built (the session database could not be
opened): the picture showed the Settings tab and only "Sessions will not be saved" was said."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QApplication

from app.gui.launch import Screenshot
from app.store import SessionStore


def test_a_panel_the_window_lacks_is_said_before_the_run(make_window, tmp_path: Path, capsys) -> None:
    window = make_window(store=None)  # what `window_store` gives when the default database cannot be opened
    assert "sessions" not in window.docks
    shooter = Screenshot(QApplication.instance(), window, tmp_path / "x.png", "sessions")
    shooter.gaps.stop()
    err = capsys.readouterr().err
    assert ("beamwise: --panel sessions: the Sessions tab is not shown because the session database could not be "
            "opened (said above); the screenshot shows the Settings tab instead.") in err


def test_a_panel_the_window_has_is_not_mentioned(make_window, tmp_path: Path, capsys) -> None:
    window = make_window(store=SessionStore(memory=True))
    assert "sessions" in window.docks
    for panel in ("sessions", "models", None):
        Screenshot(QApplication.instance(), window, tmp_path / "x.png", panel).gaps.stop()
    assert "--panel" not in capsys.readouterr().err
