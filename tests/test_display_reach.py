"""Before Qt loads on Linux: a DISPLAY no X server listens at, a WAYLAND_DISPLAY with no socket, or a library Qt's
xcb plugin links that is missing is one sentence and exit 2, not Qt's core dump. Library look-ups and X servers
are stand-ins here, so the answers do not depend on this machine."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app import display_check
from app.cli import main
from app.display_check import XCB_LIBRARIES, display_problem, x11_reachable

LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11 and Wayland sockets are Linux's")


def have_all(name: str) -> str | None:
    return f"lib{name}.so"


def lacking(*names: str):
    return lambda name: None if name in names else f"lib{name}.so"


def listening_unix_socket(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    return server


@LINUX
def test_a_local_display_is_reached_through_its_socket(tmp_path: Path) -> None:
    with listening_unix_socket(tmp_path / "X7"):
        for display in (":7", ":7.0", "unix:7"):
            assert x11_reachable(display, socket_dir=str(tmp_path))
        assert not x11_reachable(":99", socket_dir=str(tmp_path))
    assert not x11_reachable("not a display", socket_dir=str(tmp_path))


def test_a_display_on_a_host_is_reached_over_tcp() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    if port < 6000:
        server.close()
        pytest.skip("the port drawn is below X's 6000")
    with server:
        assert x11_reachable(f"127.0.0.1:{port - 6000}.0")
    assert not x11_reachable(f"127.0.0.1:{port - 6000}")  # closed: refused at once


def test_an_unreachable_x_display_is_said_in_one_line() -> None:
    problem = display_problem({"DISPLAY": ":99"}, "linux", have_all, lambda display: False)
    assert problem.startswith("there is no X display at DISPLAY=:99 (no X server listens there")
    assert "QT_QPA_PLATFORM=offscreen" in problem and "\n" not in problem


def test_missing_xcb_libraries_are_named_with_both_install_commands() -> None:
    problem = display_problem({"DISPLAY": ":0"}, "linux", lacking("xcb-icccm", "xcb-keysyms"), lambda display: True)
    assert problem == ("the window needs system libraries that are not installed: libxcb-icccm.so.4, "
                       "libxcb-keysyms.so.1. Install them (Debian/Ubuntu: sudo apt install libxcb-icccm4 "
                       "libxcb-keysyms1; Fedora: sudo dnf install xcb-util-wm xcb-util-keysyms) and start Beamwise "
                       "again.")


def test_one_missing_library_and_fedoras_shared_package_once() -> None:
    one = display_problem({"DISPLAY": ":0"}, "linux", lacking("xcb-cursor"), lambda display: True)
    assert one == display_check.missing_libraries_sentence(["xcb-cursor"])
    assert "the system library libxcb-cursor.so.0, which is not installed. Install it" in one
    several = display_problem({"DISPLAY": ":0"}, "linux", lacking("xcb-shm", "xcb-sync"), lambda display: True)
    assert "sudo apt install libxcb-shm0 libxcb-sync1; Fedora: sudo dnf install libxcb)" in several


def test_a_reachable_display_with_every_library_passes() -> None:
    assert display_problem({"DISPLAY": ":0"}, "linux", have_all, lambda display: True) is None


def test_wayland_needs_its_socket(tmp_path: Path) -> None:
    env = {"WAYLAND_DISPLAY": "wayland-9", "XDG_RUNTIME_DIR": str(tmp_path)}
    problem = display_problem(env, "linux", have_all, lambda display: True)
    assert problem.startswith(f"there is no Wayland display at {tmp_path / 'wayland-9'} (WAYLAND_DISPLAY=wayland-9")
    (tmp_path / "wayland-9").touch()  # where the compositor's socket would be
    assert display_problem(env, "linux", lacking(*XCB_LIBRARIES), lambda display: False) is None
    absolute = {"WAYLAND_DISPLAY": str(tmp_path / "wayland-9")}
    assert display_problem(absolute, "linux", have_all, lambda display: False) is None
    no_runtime = display_problem({"WAYLAND_DISPLAY": "wayland-9"}, "linux", have_all, lambda display: True)
    assert "XDG_RUNTIME_DIR is not set" in no_runtime


def test_a_dead_wayland_display_falls_back_to_x11_as_qt_does(tmp_path: Path) -> None:
    env = {"WAYLAND_DISPLAY": "wayland-9", "XDG_RUNTIME_DIR": str(tmp_path), "DISPLAY": ":0"}
    assert display_problem(env, "linux", have_all, lambda display: True) is None
    both = {**env, "QT_QPA_PLATFORM": "wayland;xcb"}
    assert display_problem(both, "linux", have_all, lambda display: True) is None
    assert display_problem(both, "linux", have_all, lambda display: False).startswith("there is no Wayland display")


def test_headless_windows_and_macos_are_left_alone() -> None:
    nothing = lacking(*XCB_LIBRARIES)
    assert display_problem({"QT_QPA_PLATFORM": "offscreen", "DISPLAY": ":99"}, "linux", nothing,
                           lambda display: False) is None
    assert display_problem({"DISPLAY": ":99"}, "win32", nothing, lambda display: False) is None
    assert display_problem({}, "darwin", nothing, lambda display: False) is None


@pytest.mark.parametrize(("reachable", "find_library", "said"), [
    (False, have_all, "there is no X display at DISPLAY=:99"),
    (True, lacking("xcb-icccm", "xcb-keysyms"), "libxcb-icccm.so.4, libxcb-keysyms.so.1"),
])
def test_gui_exits_2_with_the_sentence_before_qt_loads(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture,
                                                      reachable: bool, find_library, said: str) -> None:
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.setattr(display_check, "x11_reachable", lambda display: reachable)
    monkeypatch.setattr("ctypes.util.find_library", find_library)
    assert main(["gui"]) == 2
    assert said in capsys.readouterr().err


def qt_xcb_libraries() -> set[str]:
    """The X libraries `ldd` says PySide6's xcb plugin and its Qt library link, found or "not found"."""
    try:
        import PySide6
    except ImportError:
        return set()
    qt = Path(PySide6.__file__).parent / "Qt"
    files = [qt / "plugins" / "platforms" / "libqxcb.so", *sorted((qt / "lib").glob("libQt6XcbQpa.so*"))[:1]]
    if shutil.which("ldd") is None or not all(file.is_file() for file in files):
        return set()
    text = subprocess.run(["ldd", *map(str, files)], capture_output=True, text=True, timeout=60).stdout
    return {line.split()[0] for line in text.splitlines()
            if line.strip().startswith(("libxcb", "libX11", "libxkbcommon"))}


@LINUX
def test_every_x_library_qts_xcb_plugin_links_is_checked() -> None:
    linked = qt_xcb_libraries()
    if not linked:
        pytest.skip("no PySide6 xcb plugin or no ldd here")
    assert linked <= {file for file, _, _ in XCB_LIBRARIES.values()}
