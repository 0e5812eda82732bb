"""PyTorch, transformers and the engine (and the charts' pyqtgraph), imported once in a background thread while the
window is already in use.

Importing them takes seconds (4 s on a 2-core laptop, more from a cold disk); the window's own modules import none
of them, so it shows and answers at once. Every piece of work that needs them (the model load, the memory plan,
the Models page's list) runs in a worker thread that calls `engine_modules()` first: one thread imports, the others
wait for it, so no two threads import torch at the same time (Python's per-module import locks can deadlock, or
hand one thread a half-imported module, when two threads import the same packages in different orders). The GUI
thread never calls it: an import there would block the event loop until torch was in.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib
import importlib.util
import os
import sys
import threading
from pathlib import Path

from engine.errors import BeamwiseError

# What the workers reach for, torch and transformers first (a broken install is named as such), and the charts'
# pyqtgraph first of all (~0.4 s): the window builds them when this import ends, while a queued run has not begun.
MODULES = ("app.gui.chart_canvas", "torch", "transformers", "engine.models", "engine.search", "engine.idle",
           "app.preflight", "app.planner", "app.model_facts")

EXIT_WAIT_S = 60  # a process that ends mid-import waits this long at most for it (see `engine_modules`)
# torch's C++ libraries, in the order they need each other; not libtorch_python, whose code is Python's own.
TORCH_LIBRARIES = ("libtorch_global_deps.so", "libc10.so", "libtorch_cpu.so", "libtorch_cuda.so", "libtorch.so")

_lock = threading.Lock()
_failure: BeamwiseError | None = None
_done = threading.Event()


class EngineImportFailed(BeamwiseError):
    """PyTorch, transformers or an engine module could not be imported: a broken or partial install."""

    hint = ("Reinstall the package named into Beamwise's Python environment (for PyTorch: pip install "
            "--force-reinstall torch==2.13.0; for transformers or pyqtgraph: pip install --force-reinstall "
            "transformers pyqtgraph), or reinstall Beamwise; the window keeps working for sessions meanwhile.")


def engine_modules() -> None:
    """Import the engine's modules unless done; raises EngineImportFailed (each time) when they cannot be.
    Call it from a worker thread: it waits for an import another thread has started."""
    global _failure
    with _lock:
        if not _done.is_set():
            # A process that ends while this (daemon) thread is inside torch's import crashes on its way out (a
            # segfault or abort, 5 times in 5). `beamwise` leaves through app.cli.exit_with (os._exit); a window run
            # in-process (tests, benchmarks, a script calling app.cli.main) leaves through the interpreter's exit.
            atexit.register(_done.wait, EXIT_WAIT_S)
            name = "torch"  # what failed, when the preload does
            try:
                preload_torch_libraries()
                for name in MODULES:
                    importlib.import_module(name)
            except Exception as error:  # ImportError, OSError (a missing DLL), anything a broken install raises
                _failure = EngineImportFailed(f"Beamwise could not import {_first_line(error, name)}")
            finally:
                _done.set()
    if _failure is not None:
        raise _failure


def preload_torch_libraries() -> None:
    """On Linux, map torch's C++ libraries first through libc's `dlopen` called by ctypes, which lets go of the GIL
    while it runs: Python's own import holds the GIL through the half second libtorch_cpu's loading takes, and the
    window's event loop stood still that long. torch's import then finds them mapped. Best effort: whatever fails
    here is left to the import itself to report. Elsewhere nothing to do (on Windows torch maps its DLLs through
    ctypes calls already)."""
    spec = importlib.util.find_spec("torch") if sys.platform.startswith("linux") else None
    if spec is None or spec.origin is None:
        return
    try:
        dlopen = ctypes.CDLL(None).dlopen  # the process's own symbols: libc's dlopen, a foreign call (GIL let go)
    except (OSError, AttributeError):
        return
    dlopen.restype, dlopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_int]
    folder = Path(spec.origin).parent / "lib"
    for name in TORCH_LIBRARIES:
        library = folder / name
        if library.is_file():  # a CPU build has no libtorch_cuda
            scope = os.RTLD_GLOBAL if name == "libtorch_global_deps.so" else os.RTLD_LOCAL  # as torch maps them
            dlopen(os.fsencode(library), os.RTLD_NOW | scope)


def import_failed() -> bool:
    """True when the import has ended in an EngineImportFailed (a load then fails with its message, not the model's)."""
    return _failure is not None


def engine_failure() -> tuple[str]:
    """`engine_modules()` as an answer for `run_in_background`: ("",) once imported, else (what to reinstall,)."""
    try:
        engine_modules()
    except EngineImportFailed as error:
        return (error.user_message(),)
    return ("",)


def engine_ready() -> bool:
    """True once the import has ended, well or not: work then no longer waits for it."""
    return _done.is_set()


def engine_in_reach() -> bool:
    """True when the GUI thread may read the engine's modules (a few names, no model): the import has ended, or
    none is running and torch and transformers are in already (a process that imported them itself: tests).
    Reached for beside the background import, a half-imported transformers raised ImportError."""
    return _done.is_set() or (not _lock.locked() and {"torch", "transformers"} <= sys.modules.keys())


def _first_line(error: BaseException, name: str) -> str:
    text = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
    where = {"torch": "PyTorch", "app.gui.chart_canvas": "pyqtgraph (the charts)"}.get(name, name)
    return f"{where} ({type(error).__name__}: {text[:300]})."
