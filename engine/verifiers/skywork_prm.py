"""Skywork-o1-Open-PRM: BOS + question + "\\n", then each step followed by the step token "\\n";
a step's reward is the sigmoid of the value head at that "\\n" (SkyworkAI's prepare_input)."""

from __future__ import annotations

import torch

from engine.verifiers.parts import PRMParts
from engine.verifiers.path_kv import PathVerifier
from engine.verifiers.pieces import encode, step_text

STEP_TOKEN = "\n"


class SkyworkLayout:
    """prefix: BOS, the question and "\\n"; body: the step (inner newlines as spaces) and "\\n"; no probe."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.step_id = encode(tokenizer, STEP_TOKEN)[-1]

    def prefix(self, question: str) -> list[int]:
        return encode(self.tokenizer, f"{self.tokenizer.bos_token or ''}{question}\n")

    def body(self, question: str, previous: tuple[str, ...], step: str) -> list[int]:
        # one Beamwise step is one Skywork step: a newline inside it would be read as a step end
        return [*encode(self.tokenizer, " ".join(step_text(step).split("\n"))), self.step_id]

    def probe(self, question: str) -> list[int]:
        return []


LAYOUT = SkyworkLayout  # the family's path layout, for a plan read without weights


def verifier(parts: PRMParts) -> PathVerifier:
    head = parts.head

    def readout(hidden: torch.Tensor) -> torch.Tensor:  # hidden [B, H] -> sigmoid(value) [B]
        return torch.sigmoid(head(hidden).float()[:, 0])

    return PathVerifier(parts.label, parts.body, SkyworkLayout(parts.tokenizer), readout, parts.device,
                        pad_id=parts.pad_id)
