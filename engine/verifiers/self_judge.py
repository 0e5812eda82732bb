"""Self-judge: the generator asked whether the last step is correct, P(yes) / (P(yes) + P(no)) of its answer.

The prompt lists the steps in order and asks its question after them, so the question and every
accepted step are a reusable prefix: a candidate costs its own step and the question's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.verifiers.heads import LabelLogits
from engine.verifiers.path_kv import PathVerifier
from engine.verifiers.pieces import SENTINEL, around_sentinel, encode, render, step_text

JUDGE_SYSTEM = "You are a careful teacher who checks one reasoning step at a time."
JUDGE_ASK = "Is the last step above correct? Answer yes or no."
YES_WORDS = ("yes", "Yes", " yes", " Yes", "YES")
NO_WORDS = ("no", "No", " no", " No", "NO")


class JudgeLayout:
    """prefix: the chat up to the steps; body: the step and a blank line; probe: the question and the reply header."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self._split: dict[str, tuple[list[int], list[int]]] = {}

    def _pieces(self, question: str) -> tuple[list[int], list[int]]:
        if question not in self._split:
            user = f"Question: {question}\n\nSteps so far:\n{SENTINEL}{JUDGE_ASK}"
            if self.tokenizer.chat_template:
                text = render(self.tokenizer, [{"role": "system", "content": JUDGE_SYSTEM},
                                               {"role": "user", "content": user}], True)
                before, after = around_sentinel(text)
                prefix = encode(self.tokenizer, before)
            else:
                before, after = around_sentinel(f"{JUDGE_SYSTEM}\n\n{user}\nAnswer:")
                prefix = list(self.tokenizer.encode(before, add_special_tokens=True))
            self._split[question] = (prefix, encode(self.tokenizer, after))
        return self._split[question]

    def prefix(self, question: str) -> list[int]:
        return self._pieces(question)[0]

    def body(self, question: str, previous: tuple[str, ...], step: str) -> list[int]:
        return encode(self.tokenizer, f"{step_text(step)}\n\n")

    def probe(self, question: str) -> list[int]:
        return self._pieces(question)[1]


def first_token_ids(tokenizer, words: Sequence[str]) -> list[int]:
    return sorted({ids[0] for w in words if (ids := encode(tokenizer, w))})


def self_judge(loaded) -> PathVerifier:
    """The verifier over `loaded` (a LoadedModel): its base model, its tokenizer, its LM head's yes/no rows."""
    tokenizer = loaded.tokenizer
    yes, no = first_token_ids(tokenizer, YES_WORDS), first_token_ids(tokenizer, NO_WORDS)
    labels = LabelLogits(loaded.model.get_output_embeddings(), [*yes, *no])

    def readout(hidden: torch.Tensor) -> torch.Tensor:  # hidden [B, H] -> P(yes) / (P(yes) + P(no)) [B]
        probs = torch.softmax(labels(hidden).float(), dim=-1)  # [B, len(yes) + len(no)]
        return probs[:, : len(yes)].sum(-1)

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    return PathVerifier("self-judge", loaded.model.base_model, JudgeLayout(tokenizer), readout, loaded.device,
                        pad_id=int(pad))
