"""RLHFlow chat PRMs: each step is a user turn (the first one after the question), each answered by the
assistant with `+`; a step's reward is P(`+`) against P(`-`) of the assistant's first token."""

from __future__ import annotations

import torch

from engine.errors import NotAPRM
from engine.verifiers.heads import LabelLogits
from engine.verifiers.parts import FAMILY_LABELS, PRMParts
from engine.verifiers.path_kv import PathVerifier
from engine.verifiers.pieces import SENTINEL, around_sentinel, encode, render, require_chat_template, step_text


class RLHFlowLayout:
    """prefix: the chat up to the first step; body: (`+` closing the last turn) the step's user turn and the
    assistant header, read at its last token; no probe. Pieces are cut from the template's own rendering."""

    def __init__(self, tokenizer) -> None:
        require_chat_template(tokenizer, FAMILY_LABELS["rlhflow-prm"])
        self.tokenizer = tokenizer
        self.plus_id, self.minus_id = encode(tokenizer, "+")[-1], encode(tokenizer, "-")[-1]

    def _through(self, question: str, steps: tuple[str, ...]) -> str:
        """The chat text up to the assistant's answer to the last of `steps`."""
        messages = []
        for k, step in enumerate(steps):
            text = f"{question} {step}" if k == 0 else step
            messages.append({"role": "user", "content": text})
            if k < len(steps) - 1:
                messages.append({"role": "assistant", "content": "+"})
        return render(self.tokenizer, messages, True)

    def _prefix_text(self, question: str) -> str:
        return around_sentinel(self._through(question, (SENTINEL,)))[0]

    def prefix(self, question: str) -> list[int]:
        return encode(self.tokenizer, self._prefix_text(question))

    def body(self, question: str, previous: tuple[str, ...], step: str) -> list[int]:
        steps = tuple(step_text(s) for s in (*previous, step))
        before = self._through(question, steps[:-1]) if previous else self._prefix_text(question)
        text = self._through(question, steps)
        if not text.startswith(before):
            raise NotAPRM("this PRM's chat template rewrites earlier turns; Beamwise cannot reuse the PRM's KV.")
        return encode(self.tokenizer, text[len(before) :])

    def probe(self, question: str) -> list[int]:
        return []


LAYOUT = RLHFlowLayout  # the family's path layout, for a plan read without weights


def verifier(parts: PRMParts) -> PathVerifier:
    layout = RLHFlowLayout(parts.tokenizer)
    labels = LabelLogits(parts.head, (layout.plus_id, layout.minus_id))

    def readout(hidden: torch.Tensor) -> torch.Tensor:  # hidden [B, H] -> P(+) between + and - [B]
        return torch.softmax(labels(hidden).float(), dim=-1)[:, 0]

    return PathVerifier(parts.label, parts.body, layout, readout, parts.device, pad_id=parts.pad_id)
