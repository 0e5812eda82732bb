"""RKSC verify-skip: when the generator is decisive about a step, the verifier's pass is skipped.

RKSC gates on each candidate's mean top-1 probability over the step's tokens: the largest
probability of each position's distribution (temperature 1), whichever token was sampled. The
runner keeps it per token (engine/runner.py, `RowResult.top1`). A remote server that returns no
top log-probabilities gives only the sampled tokens' log-probabilities; there the confidence is the
mean probability of the sampled tokens, a lower bound that makes the gate skip less often, never more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def step_confidence(logprobs: Sequence[float], top1: Sequence[float] = ()) -> float:
    """Mean top-1 probability of one candidate's step (0 for an empty step); without `top1`, the mean
    probability of its sampled tokens (`logprobs`)."""
    if top1:
        return sum(top1) / len(top1)
    if not logprobs:
        return 0.0
    return sum(math.exp(lp) for lp in logprobs) / len(logprobs)


@dataclass(frozen=True)
class Decisiveness:
    """The step's highest confidence, its gap to the next, and whether they clear both thresholds."""

    top: float
    gap: float
    skip: bool


def decisiveness(confidences: Sequence[float], tau_conf: float, r_gap: float) -> Decisiveness:
    """Skip when the best confidence >= `tau_conf` and beats the runner-up by >= `r_gap`.

    A step with one candidate has no runner-up: its gap is its confidence (greedy skips on `tau_conf`).
    """
    if not confidences:
        return Decisiveness(0.0, 0.0, False)
    ordered = sorted(confidences, reverse=True)
    top = ordered[0]
    gap = top - ordered[1] if len(ordered) > 1 else top
    return Decisiveness(top, gap, top >= tau_conf and gap >= r_gap)


def best_index(values: Sequence[float]) -> int:
    """Index of the highest value (the first on ties), the candidate a ranking puts first."""
    return max(range(len(values)), key=lambda i: (values[i], -i))
