"""Whether a process that wrote a session or a journal is still running on this machine."""

from __future__ import annotations

import ctypes
import os
from datetime import datetime
from pathlib import Path

SLACK_SECONDS = 2.0  # clocks and the creation time's whole seconds


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine (POSIX signal 0; Windows OpenProcess)."""
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False
    if os.name == "nt":
        return _windows_pid_alive(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists but belongs to someone else
    return True


def _windows_pid_alive(pid: int) -> bool:
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return ctypes.get_last_error() == 5  # access denied: the process exists
    try:
        code = ctypes.c_ulong()
        kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        return code.value == 259  # STILL_ACTIVE
    finally:
        kernel32.CloseHandle(handle)


def alive_since(pid: int, created: str) -> bool:
    """Whether process `pid` is alive and may be the one that wrote a row or journal at `created` (ISO time). A
    process that started after it is another one that was given the same id (after a restart: PIDs are reused),
    so its writer is gone. Where the start time cannot be read, a live process counts."""
    if not pid_alive(pid):
        return False
    if pid == os.getpid():
        return True
    try:
        since = datetime.fromisoformat(created).timestamp()
    except (TypeError, ValueError):
        return True
    started = started_at(pid)
    return started is None or started <= since + SLACK_SECONDS


def started_at(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), or None where this system does not say."""
    try:
        if os.name == "nt":
            return _windows_started_at(pid)
        if Path("/proc/stat").is_file():
            return _linux_started_at(pid)
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return None


def _linux_started_at(pid: int) -> float:
    # Bytes: the name may hold spaces, and bytes no encoding decodes (its UnicodeDecodeError read as "no start
    # time", so a dead run's reused pid kept it "running").
    fields = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
    ticks = int(fields[19])  # field 22, starttime: clock ticks after boot
    boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_bytes().splitlines()
                if line.startswith(b"btime "))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _windows_started_at(pid: int) -> float | None:
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return None
    try:
        times = [ctypes.c_ulonglong() for _ in range(4)]  # FILETIMEs: creation, exit, kernel, user
        if not kernel32.GetProcessTimes(handle, *(ctypes.byref(t) for t in times)):
            return None
        return times[0].value / 10_000_000 - 11_644_473_600  # 100 ns steps since 1601 -> seconds since 1970
    finally:
        kernel32.CloseHandle(handle)
