"""Ctrl+C during torch's import is held back and raised once the import is done (it aborted the process)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from app.deferred_interrupt import ctrl_c_deferred


@pytest.mark.skipif(os.name == "nt", reason="signals sent to the process itself are POSIX")
def test_a_ctrl_c_inside_the_block_is_raised_at_its_end_and_not_before():
    reached_the_end = False
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # bytecode after the signal: a plain handler would have raised here
                pass
            reached_the_end = True
    assert reached_the_end
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the previous handler is back


def test_without_a_ctrl_c_nothing_is_raised_and_off_the_main_thread_nothing_changes():
    with ctrl_c_deferred():
        pass
    seen = []

    def worker() -> None:
        with ctrl_c_deferred():  # signal.signal would raise ValueError off the main thread
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]
