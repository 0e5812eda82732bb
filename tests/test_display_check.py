"""The window's start on Linux: a clear sentence instead of Qt's core dump when it cannot open."""

from __future__ import annotations

from app.cli import main
from app.display_check import NO_DISPLAY, display_problem, missing_libraries_sentence


def HAVE(name: str) -> str:  # every library the xcb plugin links
    return f"lib{name}.so"


def REACHED(display: str) -> bool:  # an X server listens at every DISPLAY
    return True


def test_no_display_is_said_plainly():
    assert display_problem({}, "linux", HAVE) == NO_DISPLAY
    assert display_problem({"QT_QPA_PLATFORM": "wayland"}, "linux", HAVE) == NO_DISPLAY


def test_missing_xcb_cursor_names_the_package():
    lacking_cursor = lambda name: None if name == "xcb-cursor" else HAVE(name)  # noqa: E731
    problem = display_problem({"DISPLAY": ":0"}, "linux", lacking_cursor, REACHED)
    assert problem == missing_libraries_sentence(["xcb-cursor"]) and "libxcb-cursor0" in problem


def test_working_setups_pass(tmp_path):
    assert display_problem({"DISPLAY": ":0"}, "linux", HAVE, REACHED) is None
    (tmp_path / "wayland-0").touch()  # the compositor's socket
    wayland = {"WAYLAND_DISPLAY": "wayland-0", "XDG_RUNTIME_DIR": str(tmp_path)}
    assert display_problem(wayland, "linux", lambda name: None) is None
    assert display_problem({"QT_QPA_PLATFORM": "offscreen"}, "linux", lambda name: None) is None
    assert display_problem({}, "win32", lambda name: None) is None


def test_gui_exits_2_with_the_sentence(monkeypatch, capsys):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    monkeypatch.setattr("sys.platform", "linux")
    assert main(["gui"]) == 2
    assert "no display" in capsys.readouterr().err
