"""Can Qt open a window here? Checked before Qt loads: on Linux its platform plugins abort the process (a core dump,
exit 134) when the display cannot be reached or a system library the xcb plugin links is missing, and say nothing a
user can act on."""

from __future__ import annotations

import ctypes.util
import os
import socket
import sys
from collections.abc import Callable, Mapping

WHAT_ELSE = ("Run Beamwise from your desktop session, use `beamwise run \"...\"` in a terminal, or set "
             "QT_QPA_PLATFORM=offscreen for a headless `beamwise gui --screenshot`.")
NO_DISPLAY = f"there is no display to open the window on (DISPLAY and WAYLAND_DISPLAY are not set). {WHAT_ELSE}"
X11_SOCKETS = "/tmp/.X11-unix"
# What Qt 6's xcb plugin links beyond Qt, GL and libc (`ldd` on PySide6's Qt/plugins/platforms/libqxcb.so and
# Qt/lib/libQt6XcbQpa.so.6), by ctypes name: (the library file, its Debian/Ubuntu package, its Fedora package).
XCB_LIBRARIES = {
    "xcb-cursor": ("libxcb-cursor.so.0", "libxcb-cursor0", "xcb-util-cursor"),
    "xcb-icccm": ("libxcb-icccm.so.4", "libxcb-icccm4", "xcb-util-wm"),
    "xcb-keysyms": ("libxcb-keysyms.so.1", "libxcb-keysyms1", "xcb-util-keysyms"),
    "xcb-image": ("libxcb-image.so.0", "libxcb-image0", "xcb-util-image"),
    "xcb-render-util": ("libxcb-render-util.so.0", "libxcb-render-util0", "xcb-util-renderutil"),
    "xcb-util": ("libxcb-util.so.1", "libxcb-util1", "xcb-util"),
    "xcb-randr": ("libxcb-randr.so.0", "libxcb-randr0", "libxcb"),
    "xcb-render": ("libxcb-render.so.0", "libxcb-render0", "libxcb"),
    "xcb-shape": ("libxcb-shape.so.0", "libxcb-shape0", "libxcb"),
    "xcb-shm": ("libxcb-shm.so.0", "libxcb-shm0", "libxcb"),
    "xcb-sync": ("libxcb-sync.so.1", "libxcb-sync1", "libxcb"),
    "xcb-xfixes": ("libxcb-xfixes.so.0", "libxcb-xfixes0", "libxcb"),
    "xcb-xkb": ("libxcb-xkb.so.1", "libxcb-xkb1", "libxcb"),
    "xcb": ("libxcb.so.1", "libxcb1", "libxcb"),
    "X11-xcb": ("libX11-xcb.so.1", "libx11-xcb1", "libX11-xcb"),
    "X11": ("libX11.so.6", "libx11-6", "libX11"),
    "xkbcommon-x11": ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0", "libxkbcommon-x11"),
    "xkbcommon": ("libxkbcommon.so.0", "libxkbcommon0", "libxkbcommon"),
}


def missing_libraries_sentence(names: list[str]) -> str:
    """One sentence naming the missing libraries (ctypes names, keys of XCB_LIBRARIES) and how to install them."""
    files, debian, fedora = zip(*(XCB_LIBRARIES[name] for name in names), strict=True)
    fedora = tuple(dict.fromkeys(fedora))  # several libraries come in Fedora's one libxcb
    which = (f"the system library {files[0]}, which is not installed" if len(files) == 1 else
             f"system libraries that are not installed: {', '.join(files)}")
    return (f"the window needs {which}. Install {'it' if len(files) == 1 else 'them'} (Debian/Ubuntu: sudo apt "
            f"install {' '.join(debian)}; Fedora: sudo dnf install {' '.join(fedora)}) and start Beamwise again.")


def _connects(family: socket.AddressFamily, address: str, timeout: float) -> bool:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as connection:
            connection.settimeout(timeout)
            connection.connect(address)
            return True
    except OSError:
        return False


def x11_reachable(display: str, socket_dir: str = X11_SOCKETS, timeout: float = 0.5) -> bool:
    """Whether an X server listens at DISPLAY (`[host]:number[.screen]`): for a local display its socket file (or
    Linux's abstract socket of that name); on a host, TCP port 6000 + number (`ssh -X` sets localhost:10.0).
    Never waits longer than `timeout` for a connection (a host name's DNS look-up aside)."""
    host, colon, rest = display.rpartition(":")
    number = rest.split(".")[0]
    if not colon or not number.isdigit():
        return False
    if host.startswith("/"):  # the display is a socket's path
        return os.path.exists(display)
    if host in ("", "unix") or host.endswith("/unix"):
        path = f"{socket_dir}/X{number}"
        return os.path.exists(path) or (sys.platform.startswith("linux")
                                        and _connects(socket.AF_UNIX, "\0" + path, timeout))
    try:
        socket.create_connection((host.removeprefix("tcp/"), 6000 + int(number)), timeout).close()
        return True
    except OSError:
        return False


def wayland_problem(env: Mapping[str, str]) -> str | None:
    """Why no Wayland compositor can be reached at WAYLAND_DISPLAY (a socket name in XDG_RUNTIME_DIR, or a path)."""
    if env.get("WAYLAND_SOCKET"):
        return None  # the compositor handed over a connected socket
    name = env.get("WAYLAND_DISPLAY")
    if not name:
        return NO_DISPLAY
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if not os.path.isabs(name) and not runtime:
        return (f"the Wayland display {name} cannot be found because XDG_RUNTIME_DIR is not set (it is, in a "
                f"desktop session). {WHAT_ELSE}")
    path = os.path.join(runtime, name)  # an absolute name stands alone
    if os.path.exists(path):
        return None
    return (f"there is no Wayland display at {path} (WAYLAND_DISPLAY={name}: no compositor's socket is there). "
            f"{WHAT_ELSE}")


def x11_problem(env: Mapping[str, str], find_library: Callable[[str], str | None],
                reachable: Callable[[str], bool]) -> str | None:
    display = env.get("DISPLAY")
    if not display:
        return NO_DISPLAY
    if not reachable(display):
        return (f"there is no X display at DISPLAY={display} (no X server listens there: a value left from another "
                f"session, or an SSH connection without -X?). {WHAT_ELSE}")
    missing = [name for name in XCB_LIBRARIES if find_library(name) is None]
    return missing_libraries_sentence(missing) if missing else None


def display_problem(env: Mapping[str, str] | None = None, platform: str | None = None,
                    find_library: Callable[[str], str | None] | None = None,
                    reachable: Callable[[str], bool] | None = None) -> str | None:
    """Why the window cannot open on this machine, as one sentence saying what to do; None when it can.

    Follows Qt's own choice of plugin: QT_QPA_PLATFORM when set (`wayland;xcb` tries each in turn), else Wayland
    when WAYLAND_DISPLAY is set, falling back to X11; the first plugin's problem is the one said. `find_library`
    and `reachable` default to ctypes' library look-up and x11_reachable."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if not platform.startswith("linux"):
        return None  # Windows and macOS bring their own platform plugin
    find_library = find_library or ctypes.util.find_library
    reachable = reachable or x11_reachable
    chosen = [part.split(":")[0].strip().lower() for part in env.get("QT_QPA_PLATFORM", "").split(";")]
    chosen = [name for name in chosen if name] or (["wayland", "xcb"] if env.get("WAYLAND_DISPLAY") else ["xcb"])
    problems = []
    for name in chosen:
        if name.startswith("wayland"):
            problem = wayland_problem(env)
        elif name == "xcb":
            problem = x11_problem(env, find_library, reachable)
        else:
            return None  # offscreen and the other headless plugins, or one that names what it lacks itself
        if problem is None:
            return None
        problems.append(problem)
    return problems[0]
