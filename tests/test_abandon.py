"""`abandonable`: a blocking call waited in slices, given up as soon as the caller's check says so."""

from __future__ import annotations

import threading
import time

import pytest

from engine.abandon import abandonable


class Stop(Exception):
    pass


def never() -> None:
    pass


def test_the_answer_and_the_error_of_the_call_reach_the_caller():
    assert abandonable(lambda: 42, "t", never, 0.01) == 42
    with pytest.raises(KeyError, match="gone"):
        abandonable(lambda: {}["gone"], "t", never, 0.01)


def test_a_check_that_raises_ends_the_wait_while_the_call_still_blocks():
    release = threading.Event()
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()

    def check() -> None:
        if stop.is_set():
            raise Stop

    started = time.monotonic()
    try:
        with pytest.raises(Stop):
            abandonable(lambda: release.wait(30), "beamwise-test-blocked", check, 0.02)
        assert time.monotonic() - started < 5
        assert any(t.name == "beamwise-test-blocked" for t in threading.enumerate())  # abandoned, still waiting
    finally:
        release.set()
