"""One candidate of a search: a path's latest step, its tokens and its scores (the search's own record), and the
search's clock its completion times are read on."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Candidate:
    id: int
    parent: int | None
    step: int
    text: str = ""
    generated: list[int] = field(default_factory=list)  # every sampled token from the first step on
    step_tokens: int = 0
    scores: list[float] = field(default_factory=list)
    aggregate: float = 0.0
    finished: bool = False  # its path ends here: EOS, or `context_full`
    context_full: bool = False  # its path filled the model's context: finished there, not by EOS
    group: int | None = 0  # None: its whole step was speculated in its parent's step
    logprobs: tuple[float, ...] = ()
    top1: tuple[float, ...] = ()  # each step token's top-1 probability (RKSC's confidence); () when not known
    lane: int = 0  # the DVTS subtree or best-of-N sample it belongs to (0 for beam and greedy)
    stream: Any = None  # its random stream (engine.rng), derived from its parent's
    speculated: int = 0  # leading tokens of its step made speculatively in its parent's step
    prefix: Any = None  # that speculation (a RowResult) until its step is recorded
    ahead: Any = None  # what its own row speculated for its children: run k for child k (RowResults)
    completed_at: float | None = None  # seconds from the run's start when its path finished (EOS, the context's end)


_outside = threading.local()  # per thread: a search runs in its caller's thread, between the caller's own work


@contextlib.contextmanager
def outside_the_search() -> Iterator[None]:
    """Around work a search's caller does while it holds an event that is no part of the search: a recorder's write
    to the session database, which waits up to 5 s for another program's lock. `SearchClock` leaves it out; any other
    time the caller takes counts (wall time: on CUDA the device keeps computing while the caller holds an event, so
    leaving out all of it would count that compute nowhere)."""
    entered = time.perf_counter()
    try:
        yield
    finally:
        _outside.seconds = outside_seconds() + time.perf_counter() - entered


def outside_seconds() -> float:
    """Seconds this thread has spent `outside_the_search` so far."""
    return getattr(_outside, "seconds", 0.0)


class SearchClock:
    """A search's seconds since `start()`: wall time, less the time its caller spent `outside_the_search` meanwhile
    (they read 5.1 s for a 0.06 s run whose recorder waited for the database's lock, and goodput with them)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 outside: Callable[[], float] = outside_seconds) -> None:
        self._clock, self._outside = clock, outside
        self.start()

    def start(self) -> None:
        self._started, self._outside_at_start = self._clock(), self._outside()

    def seconds(self) -> float:
        return self._clock() - self._started - (self._outside() - self._outside_at_start)


def path_room(prompt_tokens: int, context_length: int) -> int:
    """The tokens a path may hold after its prompt: a path (the prompt and its steps) holds at most the model's
    context, and one that fills it ends there (`Candidate.context_full`; a lookahead roll-out ends there too).
    The runner stops a step at that token (engine/step_buffers.py `fills_context`, by the position it feeds);
    the KV cache's bounds count no step past it (engine/kv/sizing.py `within_context`)."""
    return context_length - prompt_tokens


def completion(c: Candidate, path_tokens: int, end: float) -> tuple[int, int, float]:
    """A final kept beam's (id, path tokens, completion seconds): when its path ended (EOS, the context's
    end), else the search's end."""
    return c.id, path_tokens, end if c.completed_at is None else c.completed_at


def goodput(beams: Sequence[tuple[int, float]]) -> float:
    """FlashTTS's goodput: the mean over the final kept beams of the tokens a beam keeps (its path's) per
    second of its completion time. `beams`: (path tokens, completion seconds) of each kept beam."""
    rates = [tokens / seconds for tokens, seconds in beams if seconds > 0]
    return sum(rates) / len(rates) if rates else 0.0
