"""Verifiers that run no model: the generator's own confidence, and a content hash for plan-only runs."""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

from engine.verifiers.base import KeepsNoKV, PathKey, StepToScore, VerifierCost


class LogProbVerifier(KeepsNoKV):
    """Generation confidence: exp(mean token log-probability of the step), the geometric mean probability."""

    name = "logprob"

    def score(self, items: Sequence[StepToScore]) -> list[float]:
        return [math.exp(sum(i.logprobs) / len(i.logprobs)) if i.logprobs else 0.0 for i in items]

    def settle(self, kept: Sequence[PathKey]) -> VerifierCost:
        return VerifierCost()


class ContentHashVerifier(KeepsNoKV):
    """For plan-only runs: a fixed pseudo-random score per step text, so the kept beams spread over
    parents as in a real search instead of all tying (which would flatter prefix sharing)."""

    name = "content-hash"

    def score(self, items: Sequence[StepToScore]) -> list[float]:
        return [zlib.crc32(f"{i.previous_steps}|{i.step}".encode()) / 2**32 for i in items]

    def settle(self, kept: Sequence[PathKey]) -> VerifierCost:
        return VerifierCost()
