"""The window's one background import of torch, transformers and the engine (app/gui/engine_import.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from app.gui import engine_import

ROOT = Path(__file__).resolve().parent.parent

AT_ONCE = """
import sys, threading
from app.gui import engine_import
errors = []
def work():
    try:
        engine_import.engine_modules()
    except BaseException as error:
        errors.append(repr(error))
threads = [threading.Thread(target=work) for _ in range(3)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(180)
print(errors, engine_import.engine_ready(), all(name in sys.modules for name in engine_import.MODULES))
"""

PRELOAD = """
import sys
from pathlib import Path
from app.gui.engine_import import preload_torch_libraries
preload_torch_libraries()
mapped = "libtorch_cpu.so" in Path("/proc/self/maps").read_text()
before = "torch" in sys.modules
import torch
print(mapped, before, float(torch.ones(3).sum()))
"""


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_three_threads_asking_at_once_all_get_the_engine_from_one_import():
    assert run(AT_ONCE) == "[] True True"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the libraries are mapped ahead on Linux only")
def test_torch_libraries_mapped_ahead_leave_torch_working():
    assert run(PRELOAD) == "True False 3.0"


def test_a_failed_import_fails_every_caller_with_what_to_reinstall(monkeypatch):
    monkeypatch.setattr(engine_import, "MODULES", ("beamwise_no_such_module",))
    monkeypatch.setattr(engine_import, "_done", threading.Event())
    monkeypatch.setattr(engine_import, "_failure", None)
    for _ in range(2):
        with pytest.raises(engine_import.EngineImportFailed) as raised:
            engine_import.engine_modules()
        assert "could not import beamwise_no_such_module (ModuleNotFoundError" in raised.value.user_message()
    assert engine_import.engine_ready() and engine_import.import_failed()
    assert engine_import.engine_failure()[0].startswith("Beamwise could not import beamwise_no_such_module")


CLOSED_EARLY = """
import threading, time
from app.gui import engine_import
threading.Thread(target=engine_import.engine_failure, daemon=True).start()  # as the window starts it
time.sleep(0.05)
print("closed")
"""


def test_a_process_that_ends_mid_import_exits_cleanly():
    """A window run in-process (not through app.cli.exit_with) and closed in its first second: the interpreter ended
    inside the daemon thread's import of torch and the process died with a segfault or an abort (5 runs in 5)."""
    for _ in range(3):
        assert run(CLOSED_EARLY) == "closed"


def test_a_failure_before_the_first_module_is_named_too(monkeypatch):
    def broken() -> None:
        raise OSError("libc10.so: cannot open shared object file")

    monkeypatch.setattr(engine_import, "preload_torch_libraries", broken)
    monkeypatch.setattr(engine_import, "_done", threading.Event())
    monkeypatch.setattr(engine_import, "_failure", None)
    with pytest.raises(engine_import.EngineImportFailed, match=r"could not import PyTorch \(OSError: libc10.so"):
        engine_import.engine_modules()
