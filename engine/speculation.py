"""Speculative beam extension (FlashTTS): rows that end their step early decode their first child's step.

Each candidate's first child continues its random stream (engine/rng.py), so what a row samples
after its own step ends is exactly what that child would sample. The KV layer keeps those tokens'
KV beside the row's (`Live.ahead`); when the candidate is kept, its first child takes them as the
start of its step (a whole step when the speculation reached the step's end, and then the child is
not decoded at all); when it is pruned they are freed with it. The tree, scores and answer are the
same with speculation on or off; only when tokens are computed changes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from engine.rows import RowResult


def speculation_cap(ratio: float, step_lengths: Iterable[int], step_tokens: int) -> int:
    """FlashTTS's truncation rule: speculate at most `ratio` x the expected step length, at least one token.

    The expected length is the mean of the steps decoded so far in the run (`step_tokens` before any).
    """
    lengths = list(step_lengths)
    expected = sum(lengths) / len(lengths) if lengths else step_tokens
    return max(1, min(step_tokens, math.floor(ratio * expected)))


def adopted_step(ahead: RowResult, decoded: RowResult | None) -> RowResult:
    """A first child's step: the tokens speculated in its parent's step, then what its own decode added."""
    if decoded is None:
        return ahead
    return RowResult(
        fed=[*ahead.fed, *decoded.fed],
        sampled=[*ahead.sampled, *decoded.sampled],
        logprobs=[*ahead.logprobs, *decoded.logprobs],
        finished=decoded.finished,
        done=decoded.done,
        ahead=decoded.ahead,
    )


@dataclass
class Tally:
    """Speculated tokens over a run: made in idle slots, used by kept candidates' first children, discarded."""

    made: int = 0
    used: int = 0
    discarded: int = 0
