"""Math-Shepherd: "question step1 ки\\nstep2 ки..."; a step's reward is P(`+`) against P(`-`) of the
next token at its tag ` ки` (search-and-learn's reward_models.py and the model card)."""

from __future__ import annotations

import torch

from engine.errors import NotAPRM
from engine.verifiers.heads import LabelLogits
from engine.verifiers.parts import PRMParts
from engine.verifiers.path_kv import PathVerifier
from engine.verifiers.pieces import encode, step_text

STEP_TAG = "ки"


def label_ids(tokenizer) -> tuple[int, int]:
    """The `+` and `-` ids as the authors take them: the first and last id of "+ -"."""
    ids = encode(tokenizer, "+ -")
    return ids[0], ids[-1]


def tag_id(tokenizer) -> int:
    """The id of ` ки` as the authors read it (with its leading space: the Llama tokenizer's "▁ки")."""
    found = encode(tokenizer, f" {STEP_TAG}")[-1]
    if tokenizer.decode([found]).strip() != STEP_TAG:
        raise NotAPRM(f"this PRM's tokenizer has no single token for the step tag {STEP_TAG!r}.")
    return found


class MathShepherdLayout:
    """prefix: the question and a space (with the tokenizer's BOS); body: [newline] step ` ки`; no probe."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.tag_id = tag_id(tokenizer)

    def prefix(self, question: str) -> list[int]:
        return list(self.tokenizer.encode(f"{question} ", add_special_tokens=True))

    def body(self, question: str, previous: tuple[str, ...], step: str) -> list[int]:
        lead = "\n" if previous else ""
        return [*encode(self.tokenizer, f"{lead}{step_text(step)}"), self.tag_id]

    def probe(self, question: str) -> list[int]:
        return []


LAYOUT = MathShepherdLayout  # the family's path layout, for a plan read without weights


def verifier(parts: PRMParts) -> PathVerifier:
    labels = LabelLogits(parts.head, label_ids(parts.tokenizer))

    def readout(hidden: torch.Tensor) -> torch.Tensor:  # hidden [B, H] -> P(+) between + and - [B]
        return torch.softmax(labels(hidden).float(), dim=-1)[:, 0]

    return PathVerifier(parts.label, parts.body, MathShepherdLayout(parts.tokenizer), readout, parts.device,
                        pad_id=parts.pad_id)
