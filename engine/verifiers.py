"""Verifiers (process reward models) that score each candidate's latest step, and score aggregation."""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class StepToScore:
    question: str
    previous_steps: tuple[str, ...]
    step: str
    logprobs: tuple[float, ...]  # the step's sampled tokens under the generator, temperature 1


class Verifier(Protocol):
    name: str

    def score(self, items: Sequence[StepToScore]) -> list[float]:
        """One score in [0, 1] per item: how likely the latest step is correct."""
        ...


class LogProbVerifier:
    """Generation confidence: exp(mean token log-probability of the step), the geometric mean probability."""

    name = "logprob"

    def score(self, items: Sequence[StepToScore]) -> list[float]:
        return [math.exp(sum(i.logprobs) / len(i.logprobs)) if i.logprobs else 0.0 for i in items]


JUDGE_SYSTEM = "You are a careful teacher who checks one reasoning step at a time."
YES_WORDS = ("yes", "Yes", " yes", " Yes", "YES")
NO_WORDS = ("no", "No", " no", " No", "NO")


class SelfJudgeVerifier:
    """The generator asked whether the latest step is correct: P(yes) / (P(yes) + P(no)) of its next token."""

    name = "self-judge"

    def __init__(self, loaded, batch_size: int = 8) -> None:
        self.loaded = loaded
        self.batch_size = batch_size
        tokenizer = loaded.tokenizer
        self.yes_ids = _first_token_ids(tokenizer, YES_WORDS)
        self.no_ids = _first_token_ids(tokenizer, NO_WORDS)

    def _prompt(self, item: StepToScore) -> list[int]:
        previous = "\n\n".join(item.previous_steps) or "(none)"
        text = (
            f"Question: {item.question}\n\nSteps so far:\n{previous}\n\nLatest step:\n{item.step}\n\n"
            "Is the latest step correct? Answer yes or no."
        )
        return self.loaded.encode_chat(text, system=JUDGE_SYSTEM)

    @torch.inference_mode()
    def score(self, items: Sequence[StepToScore]) -> list[float]:
        scores: list[float] = []
        for start in range(0, len(items), self.batch_size):
            prompts = [self._prompt(i) for i in items[start : start + self.batch_size]]
            logits = _last_logits(self.loaded.model, prompts, self.loaded.device)  # [B, V]
            probs = torch.softmax(logits.float(), dim=-1)
            p_yes = probs[:, self.yes_ids].sum(-1)
            p_no = probs[:, self.no_ids].sum(-1)
            scores += (p_yes / (p_yes + p_no).clamp_min(1e-12)).tolist()
        return scores


def _first_token_ids(tokenizer, words: Sequence[str]) -> list[int]:
    ids = {
        tokenizer.encode(w, add_special_tokens=False)[0] for w in words if tokenizer.encode(w, add_special_tokens=False)
    }
    return sorted(ids)


def _last_logits(model: torch.nn.Module, prompts: Sequence[Sequence[int]], device: torch.device) -> torch.Tensor:
    """Next-token logits after each prompt, batched with left padding."""
    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device))
    return out.logits[:, -1]


class ContentHashVerifier:
    """For plan-only runs: a fixed pseudo-random score per step text, so the kept beams spread over
    parents as in a real search instead of all tying (which would flatter prefix sharing)."""

    name = "content-hash"

    def score(self, items: Sequence[StepToScore]) -> list[float]:
        return [zlib.crc32(f"{i.previous_steps}|{i.step}".encode()) / 2**32 for i in items]


def make_verifier(name: str, loaded) -> Verifier:
    if getattr(loaded, "plan_only", False):
        return ContentHashVerifier()
    if name == "logprob":
        return LogProbVerifier()
    if name == "self-judge":
        return SelfJudgeVerifier(loaded)
    raise ValueError(f"unknown verifier {name!r}; use logprob or self-judge.")


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
