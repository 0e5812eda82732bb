"""Plan-only runs: the real scheduler, block manager, store and policies on `meta` tensors.

A `ShapeOnlyModel` stands in for the network: it appends correctly shaped KV to every layer
through the cache's own `update` and returns flat logits, so no data is stored or moved and
every byte counter, group and resident peak is what a real run with the same shapes and the
same selections would report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from transformers import DynamicCache, LlamaConfig

from engine.chat import Turn
from engine.kv.attention import ATTENTION
from engine.models import DTYPES, KVShape, kv_shape_of

VOCAB = 16  # tokens are drawn from a tiny vocabulary without EOS: steps run to their full length


class ShapeOnlyModel(torch.nn.Module):
    """Writes `[B, H, T, D]` meta KV into each layer of the cache; computes nothing.

    `work` counts what a plan-only run costs, so that a limit on it stops the same run at the same point on any
    machine: each forward call adds its rows (each is sampled, scheduled and booked: a wide search's cost) and its
    layers (each layer's KV is written: a deep model's). Counting layers alone let a 512-candidate search run for a
    minute under a limit it never reached."""

    def __init__(self, config: LlamaConfig, shape: KVShape, dtype: torch.dtype) -> None:
        super().__init__()
        self.config, self.shape, self.kv_dtype = config, shape, dtype
        self.work = 0
        config._attn_implementation = ATTENTION  # the KV layer plans shared prefixes exactly as for a real model

    def forward(self, input_ids: torch.Tensor, cache=None, kv_heads=None, **_: object) -> SimpleNamespace:
        batch, length = input_ids.shape
        cache = cache if cache is not None else DynamicCache(config=self.config)
        self.work += batch + self.shape.num_layers
        kv = torch.empty(
            (batch, self.shape.num_kv_heads, length, self.shape.head_dim), dtype=self.kv_dtype, device="meta"
        )
        for index in range(len(cache.layers)):
            cache.update(kv, kv, index)  # layer-wise layers count their per-token copies as in a real run
            if kv_heads is not None:  # head-wise attention loads each head group as in a real run
                kv_heads.attend(index, kv, kv, kv, None, 1.0)
        return SimpleNamespace(logits=torch.zeros((batch, length, VOCAB)), cache=cache)


@dataclass
class PlannedModel:
    """The part of `LoadedModel` that search and the KV cache use, for shapes only."""

    name: str
    model: ShapeOnlyModel
    kv_shape: KVShape
    dtype: torch.dtype
    context_length: int = 1 << 20
    device: torch.device = field(default_factory=lambda: torch.device("meta"))
    eos_token_ids: tuple[int, ...] = ()
    plan_only: bool = True  # search scores steps with ContentHashVerifier
    source: str = ""

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(map(str, ids))

    def encode_chat(self, question: str, system: str | None = None, history: Sequence[Turn] = ()) -> list[int]:
        raise NotImplementedError("plan-only runs take prompt_ids")


def planned_model(source: str, dtype: str = "bfloat16") -> PlannedModel:
    """Shapes of `source` (synthetic:NAME, a folder, a .gguf, bundled) without loading weights."""
    shape = kv_shape_of(source, dtype)
    heads, dim = shape.num_kv_heads, shape.head_dim
    config = LlamaConfig(  # only the layer count matters to the cache; attention is never computed
        num_hidden_layers=shape.num_layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        hidden_size=heads * dim,
        head_dim=dim,
    )
    return PlannedModel(f"{source} (plan only)", ShapeOnlyModel(config, shape, DTYPES[dtype]), shape, DTYPES[dtype],
                        source=source)
