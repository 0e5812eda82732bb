"""One candidate of a search: a path's latest step, its tokens and its scores (the search's own record)."""

from __future__ import annotations

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
    finished: bool = False
    group: int | None = 0  # None: its whole step was speculated in its parent's step
    logprobs: tuple[float, ...] = ()
    top1: tuple[float, ...] = ()  # each step token's top-1 probability (RKSC's confidence); () when not known
    lane: int = 0  # the DVTS subtree or best-of-N sample it belongs to (0 for beam and greedy)
    stream: Any = None  # its random stream (engine.rng), derived from its parent's
    speculated: int = 0  # leading tokens of its step made speculatively in its parent's step
    prefix: Any = None  # that speculation (a RowResult) until its step is recorded
    ahead: Any = None  # what its own row speculated for its children: run k for child k (RowResults)
