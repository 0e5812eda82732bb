"""The process ends cleanly while a daemon thread is still inside torch: an abandoned model load, a plan."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BUSY_THREAD = textwrap.dedent("""
    import threading, time, torch
    torch.set_num_threads(1)
    started = threading.Event()

    def busy():
        a = torch.randn(600, 600)
        started.set()
        while True:
            a @ a  # the GIL let go inside torch's C++, as in a model load or a plan-only run

    threading.Thread(target=busy, daemon=True).start()
    started.wait()
    time.sleep(0.05)
    print("output before the exit", flush=False)
""")


def finish(last_line: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BUSY_THREAD + last_line], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_the_command_exits_with_its_status_while_a_daemon_thread_is_in_torch():
    """Before, the interpreter's finalization ended such a thread inside torch's C++ and the process aborted
    ('terminate called without an active exception', status 134): closing the window while a model loaded, or
    while the plan bar planned. `exit_with` ends it at once, its output flushed, with the command's status."""
    done = finish("from app.cli import exit_with\nexit_with(3)\n")
    assert (done.returncode, done.stdout) == (3, "output before the exit\n"), done.stderr
    assert "terminate called" not in done.stderr


def test_without_a_busy_thread_the_interpreter_exits_as_usual():
    done = subprocess.run([sys.executable, "-c", "import atexit; atexit.register(print, 'atexit ran'); "
                           "from app.cli import exit_with; exit_with(0)"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stdout) == (0, "atexit ran\n"), done.stderr


def test_the_window_without_a_console_exits_with_its_status_while_a_daemon_thread_is_in_torch():
    """pythonw, and the frozen app's beamwise-gui (no console), run with sys.stdout and sys.stderr None."""
    done = finish("import sys\nsys.stdout = sys.stderr = None\nfrom app.cli import exit_with\nexit_with(3)\n")
    assert done.returncode == 3, done.stderr
