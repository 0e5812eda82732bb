"""Attention over a group's KV in up to three parts: a shared prefix and each parent's history, both
read once, and each row's own suffix.

Candidates of a group share their leading blocks (at least the prompt). Duplicating that
prefix into every row costs device copies and memory reads; instead the prefix is kept once,
as `[H, P, D]` per layer, and every row's query attends to it in one matrix product. Siblings
(the children of one parent, forked at the step's start) also share their parent's history
after that prefix: it is gathered once per parent into `[G, H, Wp, D]` (masked where a parent
is shorter), and the sibling queries of parent `g` read `K[g]` together. Each row's own tokens
(its new ones, and any it does not share with its siblings) sit in a preallocated *arena*
`[B, H, W, D]` (left-padded). The partial softmaxes are merged exactly by their log-sum-exp in
float32 (cascade attention), so the result equals attention over the concatenated KV.

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


def uses_cascade(config) -> bool:
    """Whether a model with this config attends through `cascade_attention` (engine.models routes SDPA and
    eager models there): only then can groups read a shared prefix and a parent's history once."""
    return getattr(config, "_attn_implementation", None) == ATTENTION


@dataclass(frozen=True)
class ParentHistory:
    """Each parent's history after the shared prefix, read once by all of its rows (the children).

    `layers` holds per layer (K, V) `[G, H, Wp, D]`, parent `g`'s tokens in its first columns;
    `mask` `[G, Wp]` (True: a real column) is None when no parent is shorter than `Wp`. Parent `g`
    has up to `width` query rows: row `r` of the batch is query slot `slots[r]` of the `G * width`
    slots (parent `slots[r] // width`), or slot `r` when `slots` is None (rows ordered by parent,
    `width` each). Unused slots are padding and cost only their share of one matrix product.
    """

    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]
    mask: torch.Tensor | None  # [G, Wp] bool
    slots: torch.Tensor | None  # [B] long
    width: int  # M: query rows per parent

    @property
    def parents(self) -> int:
        return self.layers[0][0].shape[0] if self.layers else 0


@dataclass(frozen=True)
class SharedPrefix:
    """Per layer (K, V) `[H, P, D]` shared by every row of the decode batch (views of the device pool),
    and optionally each parent's history after it (`parents`). `layers` is empty when the rows
    share no prefix."""

    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]
    parents: ParentHistory | None = None

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
    scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
    batch, heads_q, _, dim = query.shape
    heads = key.shape[1]
    q = query.view(batch, heads, heads_q // heads, dim)  # [B, H, G, D]: query heads grouped by KV head
    parts = [_suffix_part(q, key, value, attention_mask, scale)]
    if kv_prefix.layers:
        parts.append(_prefix_part(q, *kv_prefix.layers[module.layer_idx], scale))
    if kv_prefix.parents is not None:
        parts.append(_parent_part(q, kv_prefix.parents, module.layer_idx, scale))
    return merge(parts).to(query.dtype).reshape(batch, 1, heads_q, dim), None  # [B, Q=1, Hq, D]


def merge(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Attention over the union of the parts' keys, from each part's (output `[..., D]`, log-sum-exp `[...]`)
    in float32; a part whose keys are all masked has log-sum-exp -inf and weight 0."""
    lse = parts[0][1]
    for _, part_lse in parts[1:]:
        lse = torch.logaddexp(lse, part_lse)
    out = torch.zeros_like(parts[0][0])
    for part_out, part_lse in parts:
        out = out + part_out * torch.exp(part_lse - lse).unsqueeze(-1)
    return out


def _prefix_part(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float):
    """Every row against the shared prefix in one product: the prefix is read once, not once per row."""
    batch, heads, group, dim = q.shape
    rows = q.permute(1, 0, 2, 3).reshape(heads, batch * group, dim)  # [H, B*G, D]
    scores = _scores(rows, k, scale)  # [H, B*G, P]
    lse = torch.logsumexp(scores, dim=-1)  # [H, B*G]
    out = torch.matmul(torch.softmax(scores, dim=-1).to(v.dtype), v).float()  # [H, B*G, D]
    out = out.view(heads, batch, group, dim).permute(1, 0, 2, 3)  # [B, H, G, D]
    return out, lse.view(heads, batch, group).permute(1, 0, 2)


def _parent_part(q: torch.Tensor, parents: ParentHistory, layer: int, scale: float):
    """Each parent's sibling queries against its history `[G, H, Wp, D]` in one batched product."""
    k, v = parents.layers[layer]
    _, heads, group, dim = q.shape
    count, width = k.shape[0], parents.width
    if parents.slots is None:
        slots = q
    else:  # rows to their parent's query slots; unused slots stay zero
        slots = q.new_zeros((count * width, heads, group, dim)).index_copy_(0, parents.slots, q)
    rows = slots.reshape(count, width, heads, group, dim).transpose(1, 2).reshape(count, heads, width * group, dim)
    scores = _scores(rows, k, scale)  # [G, H, M*Gq, Wp]
    if parents.mask is not None:
        scores = scores.masked_fill(~parents.mask[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [G, H, M*Gq]; -inf for a parent with no history
    weights = torch.exp(scores - torch.where(torch.isinf(lse), 0.0, lse).unsqueeze(-1))
    out = torch.matmul(weights.to(v.dtype), v).float()  # [G, H, M*Gq, D]
    out = out.view(count, heads, width, group, dim).transpose(1, 2).reshape(count * width, heads, group, dim)
    lse = lse.view(count, heads, width, group).transpose(1, 2).reshape(count * width, heads, group)
    if parents.slots is not None:
        out, lse = out.index_select(0, parents.slots), lse.index_select(0, parents.slots)
    return out, lse  # [B, H, Gq, D], [B, H, Gq]


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """`q @ k^T * scale` in float32. A bf16 product is rounded to bf16 before it could be widened (a score of 15 to
    1/16, 6% in its weight); SDPA's kernels keep scores in float32, and so does this. A no-op copy in float32."""
    return torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale


def _suffix_part(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float):
    scores = _scores(q, k, scale)  # [B, H, G, S]
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
