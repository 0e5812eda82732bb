"""Ctrl+C held back while torch and transformers import: raised as KeyboardInterrupt once they are in.

torch's import runs Python code from C++ (pybind11). A KeyboardInterrupt raised there cannot cross back into
C++: the process aborted ("terminate called after throwing an instance of 'pybind11::error_already_set' ...
KeyboardInterrupt", status 134) instead of saying "beamwise: interrupted" with status 130. Held back for the
second or two the import takes, the Ctrl+C is then raised in plain Python, where every command catches it.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """SIGINT noted, not raised, inside the block; raised as KeyboardInterrupt at its end (main thread only: a
    handler can only be set there, and only the main thread is interrupted)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt


def import_torch() -> None:
    """torch and transformers imported with Ctrl+C held back (a no-op once they are in)."""
    if "transformers" in sys.modules:
        return
    with ctrl_c_deferred():
        import torch  # noqa: F401
        import transformers  # noqa: F401
