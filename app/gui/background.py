"""Work that must not freeze the window, run in a daemon thread, its answer handed to the GUI thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def run_in_background(name: str, work: Callable[[], tuple[Any, ...]], deliver: Callable[..., None]) -> None:
    """Run `work` in a daemon thread and pass what it returns to `deliver` (a Qt signal's `emit`, queued
    to the GUI thread). `work` turns its own failures into an answer; an answer that arrives after its
    widget closed is dropped."""

    def body() -> None:
        answer = work()
        try:
            deliver(*answer)
        except RuntimeError:  # the widget was deleted while the work ran
            pass

    threading.Thread(target=body, name=name, daemon=True).start()
