"""Speculative beam extension (FlashTTS): rows that end their step early decode their children's steps.

Each candidate's first child continues its random stream (engine/rng.py), so what a row samples
after its own step ends is exactly what that child would sample; child k > 0 has a stream keyed by
its place in the tree, so the row can decode its step too, from the same position
(engine/speculative_runs.start_runs). A candidate whose parent ranks j-th of the B kept beams by path score gets up to
M_i = B - j + 1 such runs (`continuations`), one after another in its row's idle slots, each
truncated by the length rule (`speculation_cap`). The KV layer keeps each run's KV as a
copy-on-write fork of the row's blocks (`Live.ahead[k]`); when the candidate is kept, child k takes
run k as the start of its step (a whole step when the run reached the step's end, and then the child
is not decoded at all); when it is pruned they are freed with it. A row whose own candidate has no
run left to start is lent to the best-ranked candidate that has, and decodes that one's next child
over a copy of its history (engine/kv/lending.py), so the best beams' children start in parallel.
The tree, scores and answer are the same with speculation on or off, with one or M_i runs and with
rows lent or not; only when tokens are computed changes.
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


def continuations(rank: int, beams: int, children: int, cap: int = 0) -> int:
    """FlashTTS's M_i = B - j + 1 runs for a candidate whose parent ranks j-th (`rank`, from 1) of the
    B kept beams (`beams`), at least one, at most the `children` it would have, and at most `cap` (0: no cap)."""
    m = min(max(1, beams - rank + 1), children)
    return min(m, cap) if cap else m


def adopted_step(ahead: RowResult, decoded: RowResult | None) -> RowResult:
    """A child's step: the tokens speculated for it in its parent's step, then what its own decode added."""
    if decoded is None:
        return ahead
    return RowResult(
        fed=[*ahead.fed, *decoded.fed],
        sampled=[*ahead.sampled, *decoded.sampled],
        logprobs=[*ahead.logprobs, *decoded.logprobs],
        top1=[*ahead.top1, *decoded.top1],
        finished=decoded.finished,
        done=decoded.done,
        aheads=decoded.aheads,
    )


@dataclass
class Tally:
    """Speculated tokens over a run: made in idle slots, used by kept candidates' children, discarded with
    pruned ones; the runs (one per child) made and used; and the whole next steps the verifier checked
    ahead in their parent's pass (LookAhead verification), used by their child or discarded."""

    made: int = 0
    used: int = 0
    discarded: int = 0
    runs: int = 0
    runs_used: int = 0
    lent: int = 0  # runs decoded in rows other candidates lent
    verified_ahead: int = 0
    verified_used: int = 0
    verified_discarded: int = 0
