"""Sizing torch's thread pool: a count above the usable cores is lowered, and said to be."""

from __future__ import annotations

from app import threads
from app.threads import ThreadChoice, limit_threads, within_cores


def test_a_count_within_the_cores_is_kept_as_given(capsys):
    choice = ThreadChoice(2, "--threads 2")
    assert within_cores(choice, 2) is choice and capsys.readouterr().err == ""


def test_threads_above_the_usable_cores_are_lowered_with_a_word(monkeypatch, capsys):
    """`--threads 4` on 2 cores ran 2 threads unsaid, and eval's JSON said threads_chosen_by "--threads 4" beside
    numerics.threads 2: a rerun on a smaller machine had other numerics and was not told."""
    import torch

    pools = []
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(torch, "set_num_threads", pools.append)  # this test process's own pool stays as it is
    choice = limit_threads(given=4)
    assert (choice.threads, choice.reason) == (2, "--threads 4, lowered to the 2 usable core(s)")
    assert pools == [2]  # torch has loaded: its pool is set, not OMP_NUM_THREADS
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--threads 4 is more than the 2 usable core(s): using 2 thread(s)" in err[0]
    env = limit_threads(env={"BEAMWISE_THREADS": "3"})
    assert env.reason == "BEAMWISE_THREADS=3, lowered to the 2 usable core(s)"
