"""Reward heads built in Beamwise from checkpoint tensors: LM-head rows of label tokens, Qwen's two-class
head and Skywork's value head. None of them needs the checkpoint's own (remote) model code."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from engine.errors import PRMHeadMissing
from engine.prm_folders import QWEN_HEAD_KEYS, VALUE_HEAD_KEYS


class LabelLogits(nn.Module):
    """The LM head's logits of a few label tokens only: hidden [B, H] -> [B, K] (K = len(ids))."""

    def __init__(self, lm_head: nn.Module, ids: Sequence[int]) -> None:
        super().__init__()
        index = torch.tensor(list(ids), device=lm_head.weight.device)
        self.weight = nn.Parameter(lm_head.weight.detach()[index].clone(), requires_grad=False)  # [K, H]
        bias = getattr(lm_head, "bias", None)
        self.bias = None if bias is None else nn.Parameter(bias.detach()[index].clone(), requires_grad=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(hidden, self.weight, self.bias)


def two_class_head(tensors: dict[str, torch.Tensor]) -> nn.Sequential:
    """Qwen2.5-Math-PRM's `score`: Linear(H, H), ReLU, Linear(H, 2) from the tensors `score.*`."""
    _require(tensors, QWEN_HEAD_KEYS, "Qwen2.5-Math-PRM two-class head")
    hidden, labels = tensors["score.0.weight"].shape[1], tensors["score.2.weight"].shape[0]
    if labels != 2:
        raise PRMHeadMissing(f"the head score.2 has {labels} outputs; a Qwen2.5-Math-PRM head has 2.")
    head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2))
    head.load_state_dict({k.removeprefix("score."): v for k, v in tensors.items() if k in QWEN_HEAD_KEYS})
    return head


def value_head(tensors: dict[str, torch.Tensor]) -> nn.Linear:
    """Skywork's `v_head.summary`: Linear(H, 1), read through a sigmoid."""
    _require(tensors, VALUE_HEAD_KEYS, "Skywork value head")
    weight = tensors["v_head.summary.weight"]  # [1, H]
    head = nn.Linear(weight.shape[1], 1)
    head.load_state_dict({"weight": weight, "bias": tensors["v_head.summary.bias"]})
    return head


def _require(tensors: dict[str, torch.Tensor], keys: Sequence[str], what: str) -> None:
    missing = [k for k in keys if k not in tensors]
    if missing:
        raise PRMHeadMissing(f"the {what} is missing: no {', '.join(missing)} in the weights.")
