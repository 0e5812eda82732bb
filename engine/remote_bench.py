"""The same search on a generator server and on this machine: requests, tokens and seconds per step.

`bench --backend openai` prints these side by side. A step's seconds run from the end of the step before
(or the run's start) to its selection, so the server's first request, which prefills the prompt, counts
in step 1 as the local prefill does. It asserts nothing about speed: that is for the reader of the table.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from engine import events as ev


@dataclass(frozen=True)
class StepCost:
    step: int
    requests: int  # HTTP requests sent during the step (0 for a local run)
    tokens: int  # candidate tokens made in the step
    seconds: float


@dataclass
class SearchCost:
    """One search, step by step; `ok` False with the run's own message when it did not finish."""

    backend: str  # "openai" or "local"
    model: str
    ok: bool = False
    message: str = ""
    error: str = ""  # the failure's error name, as a run's exit status reads it
    steps: list[StepCost] = field(default_factory=list)
    seconds: float = 0.0
    answer: str = ""

    @property
    def requests(self) -> int:
        return sum(s.requests for s in self.steps)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.steps)

    def to_dict(self) -> dict:
        return {**asdict(self), "requests": self.requests, "tokens": self.tokens}


def measure(backend: str, events: Iterable[ev.Event], requests: Callable[[], int] = lambda: 0) -> SearchCost:
    """Fold one run's events into a SearchCost; `requests()` is the backend's request counter so far.
    Requests are counted from the run's start on (the model check before it is not a step's)."""
    cost = SearchCost(backend, "")
    started = mark = time.perf_counter()
    sent, tokens = requests(), 0
    for event in events:
        if isinstance(event, ev.RunStarted):
            cost.model, sent = event.model, requests()
        elif isinstance(event, ev.CandidateText):
            tokens += event.tokens
        elif isinstance(event, ev.StepSelected):
            now, total = time.perf_counter(), requests()
            cost.steps.append(StepCost(event.step, total - sent, tokens, now - mark))
            mark, sent, tokens = now, total, 0
        elif isinstance(event, ev.RunFinished):
            cost.ok, cost.answer = True, event.answer
        elif isinstance(event, ev.RunFailed | ev.RunCancelled):
            cost.message, cost.error = getattr(event, "message", "cancelled"), getattr(event, "error", "")
    cost.seconds = time.perf_counter() - started
    return cost
