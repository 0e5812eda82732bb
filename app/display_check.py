"""Can Qt open a window here? Checked before Qt loads: its xcb plugin aborts the process (a core dump, exit 134)
when there is no display or when `libxcb-cursor0` is missing, and says nothing a user can act on."""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Callable, Mapping

HEADLESS = ("offscreen", "minimal", "vnc", "eglfs", "linuxfb")
NO_DISPLAY = ("there is no display to open the window on (DISPLAY and WAYLAND_DISPLAY are not set). "
              "Run Beamwise from your desktop session, use `beamwise run \"...\"` in a terminal, or set "
              "QT_QPA_PLATFORM=offscreen for a headless `beamwise gui --screenshot`.")
NO_XCB_CURSOR = ("the window needs the system library libxcb-cursor0, which is not installed. "
                 "Install it (Debian/Ubuntu: sudo apt install libxcb-cursor0; Fedora: sudo dnf install "
                 "xcb-util-cursor; Arch: sudo pacman -S xcb-util-cursor) and start Beamwise again.")


def display_problem(env: Mapping[str, str] | None = None, platform: str | None = None,
                    find_library: Callable[[str], str | None] = ctypes.util.find_library) -> str | None:
    """Why the window cannot open on this machine, as one sentence saying what to do; None when it can."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if not platform.startswith("linux"):
        return None  # Windows and macOS bring their own platform plugin
    chosen = env.get("QT_QPA_PLATFORM", "").split(":")[0].strip().lower()
    if chosen in HEADLESS:
        return None
    if chosen == "wayland" or (not chosen and env.get("WAYLAND_DISPLAY")):
        return None if env.get("WAYLAND_DISPLAY") else NO_DISPLAY
    if not env.get("DISPLAY"):
        return NO_DISPLAY
    if find_library("xcb-cursor") is None:
        return NO_XCB_CURSOR
    return None
