"""Qwen2.5-Math-PRM: the steps joined and ended by `<extra_0>` in the assistant turn of its chat template;
a step's reward is the positive-class probability of the two-class head at its `<extra_0>`."""

from __future__ import annotations

import torch

from engine.verifiers.parts import FAMILY_LABELS, PRMParts
from engine.verifiers.path_kv import PathVerifier
from engine.verifiers.pieces import (
    SENTINEL,
    around_sentinel,
    encode,
    render,
    require_chat_template,
    single_token,
    step_text,
)

STEP_TAG = "<extra_0>"
SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


class QwenPRMLayout:
    """prefix: system + user turn + assistant header; body: the step and `<extra_0>`; no probe."""

    def __init__(self, tokenizer) -> None:
        require_chat_template(tokenizer, FAMILY_LABELS["qwen-prm"])
        self.tokenizer = tokenizer
        self.tag_id = single_token(tokenizer, STEP_TAG, "step tag")

    def prefix(self, question: str) -> list[int]:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question},
                    {"role": "assistant", "content": SENTINEL}]
        return encode(self.tokenizer, around_sentinel(render(self.tokenizer, messages, False))[0])

    def body(self, question: str, previous: tuple[str, ...], step: str) -> list[int]:
        return [*encode(self.tokenizer, step_text(step)), self.tag_id]

    def probe(self, question: str) -> list[int]:
        return []


LAYOUT = QwenPRMLayout  # the family's path layout, for a plan read without weights


def verifier(parts: PRMParts) -> PathVerifier:
    head = parts.head

    def readout(hidden: torch.Tensor) -> torch.Tensor:  # hidden [B, H] -> P(positive) [B]
        return torch.softmax(head(hidden).float(), dim=-1)[:, 1]

    return PathVerifier(parts.label, parts.body, QwenPRMLayout(parts.tokenizer), readout, parts.device,
                        pad_id=parts.pad_id)
