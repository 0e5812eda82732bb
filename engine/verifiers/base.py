"""What every verifier shares: the item it scores, its interface, its token cost, and step-score aggregation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from engine.verifiers.entropy_exit import ExitCost

PathKey = tuple[str, ...]  # the question, then each step's text: names a path in a verifier's KV tree


@dataclass(frozen=True)
class StepToScore:
    question: str
    previous_steps: tuple[str, ...]
    step: str
    logprobs: tuple[float, ...]  # the step's sampled tokens under the generator, temperature 1

    @property
    def parent_key(self) -> PathKey:
        return (self.question, *self.previous_steps)

    @property
    def key(self) -> PathKey:
        return (self.question, *self.previous_steps, self.step)


@dataclass(frozen=True)
class VerifierCost:
    """Tokens a verifier ran for one step (all candidates), and what rescoring every whole path would run."""

    tokens: int = 0
    tokens_full: int = 0
    exit: ExitCost | None = None  # RKSC's layer-entropy exit, when the verifier has one

    def __post_init__(self) -> None:
        if self.tokens < 0 or self.tokens_full < 0:
            raise ValueError(f"token counts must be 0 or more (got {self.tokens}, {self.tokens_full}).")


class Verifier(Protocol):
    name: str

    def score(self, items: Sequence[StepToScore]) -> list[float]:
        """One score in [0, 1] per item: how likely the latest step is correct."""
        ...

    def settle(self, kept: Sequence[PathKey]) -> VerifierCost:
        """The step is decided: keep state only for the `kept` paths; the tokens run since the last call."""
        ...


def aggregate(scores: Sequence[float], how: str) -> float:
    """A path's score from its step scores: the last, the weakest, the product or the mean."""
    if not scores:
        return 0.0
    if how == "last":
        return scores[-1]
    if how == "min":
        return min(scores)
    if how == "prod":
        return math.prod(scores)
    if how == "mean":
        return sum(scores) / len(scores)
    raise ValueError(f"unknown aggregation {how!r}; use last, min, prod or mean.")
