"""A loaded PRM before it is wired into a verifier: body, head, tokenizer and which family it is."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from engine.prm_names import FAMILY_LABELS, named_family

__all__ = ["FAMILY_LABELS", "PRMParts", "named_family"]


@dataclass
class PRMParts:
    """`body` returns `last_hidden_state`; `head` is the reward head (Qwen, Skywork) or the LM head (the others)."""

    family: str
    source: str
    body: nn.Module
    head: nn.Module
    tokenizer: PreTrainedTokenizerBase
    device: torch.device

    def __post_init__(self) -> None:
        if self.family not in FAMILY_LABELS:
            raise ValueError(f"unknown PRM family {self.family!r}; use one of {', '.join(FAMILY_LABELS)}.")

    @property
    def label(self) -> str:
        """What the user reads: the family and where it came from."""
        return f"{FAMILY_LABELS[self.family]} ({self.source})"

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id or 0)
