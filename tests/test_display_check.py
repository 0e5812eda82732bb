"""The window's start on Linux: a clear sentence instead of Qt's core dump when it cannot open."""

from __future__ import annotations

from app.cli import main
from app.display_check import NO_DISPLAY, NO_XCB_CURSOR, display_problem

HAVE = {"xcb-cursor": "libxcb-cursor.so.0"}.get


def test_no_display_is_said_plainly():
    assert display_problem({}, "linux", HAVE) == NO_DISPLAY
    assert display_problem({"QT_QPA_PLATFORM": "wayland"}, "linux", HAVE) == NO_DISPLAY


def test_missing_xcb_cursor_names_the_package():
    assert display_problem({"DISPLAY": ":0"}, "linux", lambda name: None) == NO_XCB_CURSOR
    assert "libxcb-cursor0" in NO_XCB_CURSOR


def test_working_setups_pass():
    assert display_problem({"DISPLAY": ":0"}, "linux", HAVE) is None
    assert display_problem({"WAYLAND_DISPLAY": "wayland-0"}, "linux", lambda name: None) is None
    assert display_problem({"QT_QPA_PLATFORM": "offscreen"}, "linux", lambda name: None) is None
    assert display_problem({}, "win32", lambda name: None) is None


def test_gui_exits_2_with_the_sentence(monkeypatch, capsys):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    monkeypatch.setattr("sys.platform", "linux")
    assert main(["gui"]) == 2
    assert "no display" in capsys.readouterr().err
