"""Attention over a group's KV in two parts: a shared prefix read in place, and each row's own suffix.

Candidates of a group share their leading blocks (at least the prompt). Duplicating that
prefix into every row costs device copies and memory reads; instead the prefix is kept once,
as `[H, P, D]` per layer, and every row's query attends to it in one matrix product, while
its own tokens sit in a preallocated *arena* `[B, H, W, D]` (left-padded). The two partial
softmaxes are merged exactly by their log-sum-exp (cascade attention), so the result equals
attention over the concatenated KV.

The model runs through a registered attention function, `beamwise`, that does this when the
forward call passes `kv_prefix=`, hands the layer to the head-wise policy when it passes
`kv_heads=`, and is plain SDPA otherwise (prefill, verifiers, reference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTENTION = "beamwise"


@dataclass(frozen=True)
class SharedPrefix:
    """Per layer (K, V) `[H, P, D]` shared by every row of the decode batch (views of the device pool)."""

    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]

    @property
    def tokens(self) -> int:
        return self.layers[0][0].shape[-2] if self.layers else 0


class HeadAttention(Protocol):
    """Attention of one layer computed head group by head group (engine/kv/headwise.py)."""

    def attend(
        self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask, scale: float
    ) -> torch.Tensor:
        """`[B, Q, Hq, D]` for `query` `[B, Hq, Q, D]`; `key`, `value` `[B, H, Q, D]` are the new tokens only."""
        ...


def enable_cascade(model: torch.nn.Module) -> None:
    """Route the model's attention through `cascade_attention` (a plain SDPA call without a prefix)."""
    AttentionInterface.register(ATTENTION, cascade_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    if getattr(model.config, "_attn_implementation", None) in ("sdpa", "eager", None):
        model.set_attn_implementation(ATTENTION)


def cascade_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    kv_prefix: SharedPrefix | None = None,
    kv_heads: HeadAttention | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    # query: [B, Hq, Q, D]; key, value: [B, H, S, D] (the rows' own tokens, new ones included)
    if kv_heads is not None:  # head-wise offloading: the past KV is on the host, head group by head group
        scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
        return kv_heads.attend(module.layer_idx, query, key, value, attention_mask, scale), None
    if kv_prefix is None or query.shape[2] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    k_prefix, v_prefix = kv_prefix.layers[module.layer_idx]
    scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
    batch, heads_q, _, dim = query.shape
    heads = key.shape[1]
    q = query.view(batch, heads, heads_q // heads, dim)  # [B, H, G, D]: query heads grouped by KV head
    out_p, lse_p = _prefix_part(q, k_prefix, v_prefix, scale)
    out_s, lse_s = _suffix_part(q, key, value, attention_mask, scale)
    lse = torch.logaddexp(lse_p, lse_s)
    out = out_p * torch.exp(lse_p - lse).unsqueeze(-1) + out_s * torch.exp(lse_s - lse).unsqueeze(-1)
    return out.to(query.dtype).reshape(batch, 1, heads_q, dim), None  # [B, Q=1, Hq, D]


def _prefix_part(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float):
    """Every row against the shared prefix in one product: the prefix is read once, not once per row."""
    batch, heads, group, dim = q.shape
    rows = q.permute(1, 0, 2, 3).reshape(heads, batch * group, dim)  # [H, B*G, D]
    scores = torch.matmul(rows, k.transpose(-1, -2)).float() * scale  # [H, B*G, P]
    lse = torch.logsumexp(scores, dim=-1)  # [H, B*G]
    out = torch.matmul(torch.softmax(scores, dim=-1).to(v.dtype), v).float()  # [H, B*G, D]
    out = out.view(heads, batch, group, dim).permute(1, 0, 2, 3)  # [B, H, G, D]
    return out, lse.view(heads, batch, group).permute(1, 0, 2)


def _suffix_part(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float):
    scores = torch.matmul(q, k.transpose(-1, -2)).float() * scale  # [B, H, G, S]
    if mask is not None:  # [B, 1, 1, S] (True: attend) or additive
        allowed = mask if mask.dtype == torch.bool else mask == 0
        scores = scores.masked_fill(~allowed[..., -scores.shape[-1] :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [B, H, G]
    out = torch.matmul(torch.softmax(scores, dim=-1).to(v.dtype), v).float()  # [B, H, G, D]
    return out, lse


class ArenaLayer(DynamicLayer):
    """One layer's rows in a preallocated arena `[B, H, W, D]`: decoding writes columns in place."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, filled: int) -> None:
        super().__init__()
        self.arena_keys, self.arena_values, self.filled = keys, values, filled
        self.dtype, self.device = keys.dtype, keys.device
        self.keys, self.values = keys[:, :, :filled], values[:, :, :filled]
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        new = key_states.shape[-2]
        end = self.filled + new
        if end > self.arena_keys.shape[-2]:
            raise RuntimeError(f"arena of {self.arena_keys.shape[-2]} columns is full (asked for {end})")
        self.arena_keys[:, :, self.filled : end].copy_(key_states)
        self.arena_values[:, :, self.filled : end].copy_(value_states)
        self.filled = end
        self.keys, self.values = self.arena_keys[:, :, :end], self.arena_values[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.filled


def arena_cache(config, arena: torch.Tensor, filled: int) -> DynamicCache:
    """A transformers cache over `arena` `[L, 2, B, H, W, D]` whose first `filled` columns hold KV."""
    cache = DynamicCache(config=config)
    cache.layers = [ArenaLayer(arena[i, 0], arena[i, 1], filled) for i in range(arena.shape[0])]
    return cache
