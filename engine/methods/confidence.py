"""RKSC verify-skip: when the generator is decisive about a step, the verifier's pass is skipped.

RKSC gates on each candidate's mean top-1 probability over the step's tokens. The runner records
the log-probability of the *sampled* token only (engine/rows.py), so the confidence here is the
mean probability of the sampled tokens: equal to RKSC's where sampling picked the top token (always
at temperature 0) and a lower bound otherwise, which makes the gate skip less often, never more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def step_confidence(logprobs: Sequence[float]) -> float:
    """Mean token probability of one candidate's step (0 for an empty step)."""
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
