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
    ahead: str | None = None  # the first child's next step, speculated whole: verified in the same pass when it can

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
    forwards: int = 0  # forward calls the verifier made (batches of rows)
    rows: int = 0  # rows in those calls: one per path segment run (a look-ahead rides in its step's row)
    ahead_verified: int = 0  # next steps verified with their parent's step (LookAhead verification)
    ahead_used: int = 0  # of the look-aheads made before, those a child took (its score, or its KV)
    ahead_discarded: int = 0  # ... and those freed unused (their candidate was pruned)

    def __post_init__(self) -> None:
        counts = (self.tokens, self.tokens_full, self.forwards, self.rows, self.ahead_verified, self.ahead_used,
                  self.ahead_discarded)
        if min(counts) < 0:
            raise ValueError(f"verifier counts must be 0 or more (got {counts}).")


@dataclass(frozen=True)
class VerifierMemory:
    """The verifier's KV at one moment, and its traffic since the last step was settled (bytes)."""

    budget_bytes: int = 0  # its device share; 0 when it keeps no KV or has no budget
    device_bytes: int = 0  # segments at rest in the device pool (whole slots)
    host_bytes: int = 0
    peak_device_bytes: int = 0  # segments and arenas together, high-water mark of the step
    h2d_bytes: int = 0
    d2h_bytes: int = 0
    d2d_bytes: int = 0
    h2d_calls: int = 0  # copy calls since the step was settled (one `copy_` each)
    d2h_calls: int = 0
    d2d_calls: int = 0


class Verifier(Protocol):
    name: str
    looks_ahead: bool  # scores `StepToScore.ahead` with its step and remembers it for the child (path_kv.py)

    def score(self, items: Sequence[StepToScore]) -> list[float]:
        """One score in [0, 1] per item: how likely the latest step is correct."""
        ...

    def settle(self, kept: Sequence[PathKey]) -> VerifierCost:
        """The step is decided: keep state only for the `kept` paths; the tokens run since the last call."""
        ...

    def batch_bytes(self, question: str, rows: int, step_tokens: int, steps: int) -> int:
        """Device KV bytes one verification batch of `rows` paths needs at the last step (0: keeps no KV)."""
        ...

    def row_bytes(self, question: str, step_tokens: int, steps: int) -> int:
        """Device KV bytes one path can need at the last step, its steps read in the most tokens they can be:
        the least share the run can go on with (0: keeps no KV)."""
        ...

    def use_budget(self, device_bytes: int, block_size: int = 16) -> None:
        """Hold the verifier's KV within `device_bytes` on the device (its share of the KV budget)."""
        ...

    def memory(self) -> VerifierMemory: ...

    def placement(self, key: PathKey) -> tuple[int, int]:
        """(device bytes, host bytes) of the verifier's KV of the path's own last step; (0, 0) when it has none."""
        ...

    def close(self) -> None:
        """The run is over: give the verifier's KV memory back."""
        ...


class KeepsNoKV:
    """The memory side of a verifier that runs no model: it needs, holds and moves no KV (nor looks ahead)."""

    looks_ahead = False

    def batch_bytes(self, question: str, rows: int, step_tokens: int, steps: int) -> int:
        return 0

    def row_bytes(self, question: str, step_tokens: int, steps: int) -> int:
        return 0

    def use_budget(self, device_bytes: int, block_size: int = 16) -> None:
        return None

    def memory(self) -> VerifierMemory:
        return VerifierMemory()

    def placement(self, key: PathKey) -> tuple[int, int]:
        return (0, 0)

    def close(self) -> None:
        return None


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
