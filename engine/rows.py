"""One decode row and what decoding it for a step returns: shared by the runner, the KV layer and the search."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Row:
    """One candidate in a decode batch."""

    candidate_id: int
    pending: int  # the token to feed first: its KV does not exist yet
    position: int  # position id of `pending` (= tokens already in the KV)
    generator: Any  # the candidate's random stream (engine.rng)
    prefix: tuple[int, ...] = ()  # tokens of this step sampled before, speculatively (they count to its stop rules)
    continuations: int = 1  # most children whose steps the row speculates after its own ends (FlashTTS's M_i)


@dataclass
class RowResult:
    fed: list[int] = field(default_factory=list)  # tokens whose KV this step created
    sampled: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # log p(token) at temperature 1
    top1: list[float] = field(default_factory=list)  # max p over the vocabulary at temperature 1 (RKSC confidence)
    finished: bool = False  # sampled an EOS token
    done: bool = False  # this step is over for the row
    aheads: list[RowResult] = field(default_factory=list)  # speculative: child k's step, decoded in idle slots
    start: int = 0  # a speculative run: the forward call that fed its first token (its KV's first new column)
    row: int = -1  # a speculative run decoded in another candidate's row (lent to it): that batch row; -1 its own


@dataclass(frozen=True)
class StepRules:
    max_tokens: int
    delimiter: str | None
    eos_ids: frozenset[int]
    temperature: float
    top_p: float
    decode: Callable[[Sequence[int]], str]
    context_length: int
    observe: Callable[[int, torch.Tensor, int], None] | None = None  # (candidate, logits [V], token) for tests
    forced: dict[int, tuple[int, ...]] | None = None  # teacher forcing: candidate -> the tokens it must emit
    speculate: int = 0  # most speculative tokens a row that ended its step early makes (0: none)
