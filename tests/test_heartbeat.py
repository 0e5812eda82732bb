"""Progress inside a step, folded from the engine's existing events and said while the search is silent."""

from __future__ import annotations

import threading

from app.heartbeat import Heartbeat, StepProgress
from engine import events as ev


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _started() -> ev.RunStarted:
    return ev.RunStarted(question="q", model="m", verifier="logprob", device="cpu (emulated GPU)", emulated=True,
                         policy="lbs", kv_budget_bytes=1, search={"beams": 2, "width": 3}, cache={})


def test_a_step_says_its_phase_time_groups_and_candidates():
    clock = Clock()
    progress = StepProgress(clock)
    progress.apply(_started())
    progress.apply(ev.StepStarted(step=1, beams=()))
    clock.now += 12
    progress.apply(ev.GroupScheduled(step=1, group=0, candidates=(1, 2, 3), prefetched=()))
    for cid in (1, 2):
        progress.apply(ev.CandidateText(1, cid, None, "x", 5, False, 0))
    assert progress.line() == "step 1: decoding, 12 s, 1 group(s) done, 2/6 candidates written (10 tokens)"
    progress.apply(ev.StepStarted(step=2, beams=(1, 2)))
    assert progress.candidates == 6 and progress.line().startswith("step 2: decoding, 0 s")


def test_heartbeat_speaks_only_while_the_search_is_silent():
    said, spoke = [], threading.Event()

    def say(line: str) -> None:
        said.append(line)
        spoke.set()

    progress = StepProgress()
    with Heartbeat(progress, say, interval=0.02) as beat:
        beat.saw(_started())
        assert spoke.wait(5)
    assert said[0].startswith("reading the question")
