"""What the search, the verifiers and the KV layer read from a loaded generator: one protocol.

`engine.models.LoadedModel` (real weights) and `engine.plan_only.PlannedModel` (shapes only,
for plans) both satisfy it; nothing probes a loaded model with `getattr` or `hasattr`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from engine.chat import Turn
from engine.models import KVShape


class Generator(Protocol):
    source: str  # what was loaded: 'bundled', a folder, a .gguf file or synthetic:NAME (keys the prefix cache)
    name: str
    model: torch.nn.Module  # called with input_ids, position_ids, attention_mask and the cache (engine/hf_compat.py)
    kv_shape: KVShape
    dtype: torch.dtype
    device: torch.device
    context_length: int
    eos_token_ids: tuple[int, ...]
    plan_only: bool  # True: no weights; steps are scored by a content hash, not a verifier

    def decode(self, ids: Sequence[int]) -> str: ...

    def encode_chat(self, question: str, system: str | None = None, history: Sequence[Turn] = ()) -> list[int]: ...
