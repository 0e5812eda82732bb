"""One candidate of a search: a path's latest step, its tokens and its scores (the search's own record)."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    group: int = 0
    logprobs: tuple[float, ...] = ()
    lane: int = 0  # the DVTS subtree or best-of-N sample it belongs to (0 for beam and greedy)
