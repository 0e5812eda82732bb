"""Self-judge on a generator server: the served model is asked whether the last step is correct, and the score
is P(yes) / (P(yes) + P(no)) over the first token of its reply, read from the server's top log-probabilities.

The prompt is the local self-judge's (engine/verifiers/self_judge.py) as plain text, since /v1/completions
applies no chat template; the question and the accepted steps come first, so the server's prefix cache
reuses them from one candidate to the next.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from engine.backends.openai import OpenAICompletions
from engine.verifiers.base import KeepsNoKV, PathKey, StepToScore, VerifierCost
from engine.verifiers.pieces import step_text
from engine.verifiers.self_judge import JUDGE_ASK, JUDGE_SYSTEM

TOP_LOGPROBS = 10  # vLLM allows 20 by default, SGLang and llama.cpp more; yes and no are near the top


def judge_prompt(item: StepToScore) -> str:
    steps = "".join(f"{step_text(s)}\n\n" for s in (*item.previous_steps, item.step))
    return f"{JUDGE_SYSTEM}\n\nQuestion: {item.question}\n\nSteps so far:\n{steps}{JUDGE_ASK}\nAnswer:"


def yes_share(top: dict[str, float]) -> float:
    """P(yes) / (P(yes) + P(no)) over tokens such as ' Yes' and 'no'; 0.5 when neither is among them."""
    mass = {"yes": 0.0, "no": 0.0}
    for token, logprob in top.items():
        word = token.strip().lower()
        if word in mass:
            mass[word] += math.exp(logprob)
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total > 0 else 0.5


class RemoteSelfJudge(KeepsNoKV):  # the server holds its KV: none here
    """One greedy one-token request per candidate; `settle` reports the prompt tokens the server read."""

    name = "self-judge"

    def __init__(self, backend: OpenAICompletions) -> None:
        self.backend = backend
        self.tokens = 0

    def score(self, items: Sequence[StepToScore]) -> list[float]:
        scores = []
        for item in items:
            top, prompt_tokens = self.backend.first_token_choices(judge_prompt(item), TOP_LOGPROBS)
            self.tokens += prompt_tokens
            scores.append(yes_share(top))
        return scores

    def settle(self, kept: Sequence[PathKey]) -> VerifierCost:
        """The server read each judge prompt whole (its prefix cache may have skipped work we cannot see)."""
        cost, self.tokens = VerifierCost(self.tokens, self.tokens), 0
        return cost
