"""Teacher forcing: replay one run's tokens and selections through another policy, and compare logits.

On a GPU in bf16 a different grouping of the same rows changes low bits of the logits, so
sampled tokens can diverge and two policies' runs stop being comparable. Forcing every
candidate to emit the reference run's tokens, and every step to keep the reference's beams,
keeps the tree identical, so the logits at each position can be compared directly.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Replay:
    tokens: dict[int, tuple[int, ...]]  # candidate id -> the tokens of its step
    kept: dict[int, tuple[int, ...]]  # step -> the beams kept, best first


@dataclass
class Observed:
    """What a run's decode positions and selections were (filled by `observe` and `take`)."""

    tokens: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    logits: dict[int, list[torch.Tensor]] = field(default_factory=lambda: defaultdict(list))
    kept: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def observe(self, candidate: int, logits: torch.Tensor, token: int) -> None:
        self.tokens[candidate].append(token)
        self.logits[candidate].append(logits.detach().float().cpu())

    def take(self, events: Iterable) -> list:
        """Record the selections of an event stream; returns the events."""
        seen = []
        for event in events:
            if event.type == "step_selected":
                self.kept[event.step] = event.kept
            seen.append(event)
        return seen

    def replay(self) -> Replay:
        return Replay({c: tuple(t) for c, t in self.tokens.items()}, dict(self.kept))


def max_logit_diff(reference: Observed, other: Observed) -> float:
    """The largest |logit difference| over every candidate and position both runs decoded."""
    worst = 0.0
    for candidate, logits in reference.logits.items():
        for want, got in zip(logits, other.logits.get(candidate, ()), strict=False):
            worst = max(worst, float((want - got).abs().max()))
    return worst
