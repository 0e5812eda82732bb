"""Waiting for a call that may block for long (a name lookup, a silent server) without being held by it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def abandonable(work: Callable[[], T], name: str, check: Callable[[], None], slice_s: float) -> T:
    """`work()` on a daemon thread, waited in slices of `slice_s` seconds. Between slices `check()` may raise (a
    Stop, a cancel, a deadline): the wait ends at once, and the abandoned call ends on its own later, its answer
    dropped. An exception `work` raises is raised here, in the caller's thread."""
    answer: list[tuple[bool, object]] = []

    def call() -> None:
        try:
            answer.append((True, work()))
        except BaseException as error:  # handed to the caller's thread
            answer.append((False, error))

    worker = threading.Thread(target=call, name=name, daemon=True)
    worker.start()
    while True:
        worker.join(slice_s)
        if not worker.is_alive():
            break
        check()
    ok, value = answer[0]
    if not ok:
        raise value  # type: ignore[misc]
    return value  # type: ignore[return-value]
