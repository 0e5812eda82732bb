"""Attention over a group's KV in up to three parts: a shared prefix and each parent's history, both
read once, and each row's own suffix.

Candidates of a group share their leading blocks (at least the prompt). Duplicating that
prefix into every row costs device copies and memory reads; instead the prefix is kept once,
as `[H, P, D]` per layer, and every row's query attends to it in one matrix product. Siblings
(the children of one parent, forked at the step's start) also share their parent's history
after that prefix: it is gathered once per parent into `[G, H, Wp, D]` (masked where a parent
is shorter), and the sibling queries of parent `g` read `K[g]` together. Each row's own tokens
(its new ones, and any it does not share with its siblings) sit in a preallocated *arena*
`[B, H, W, D]` (left-padded). Each part's scores come out in float32 in the rows' layout and one
softmax runs over all of them side by side (cascade attention), so the result is attention over the
concatenated KV without ever concatenating the keys; each part's values are then read with its slice
of the weights, in the layout it was scored in.

The model runs through a registered attention function, `beamwise`, that does this when the
forward call passes `kv_prefix=`, hands the layer to the head-wise policy when it passes
`kv_heads=`, and is plain SDPA otherwise (prefill, verifiers, reference).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
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

    @property
    def tokens(self) -> int:
        """Wp: 0 at a search's first step, when no parent has history after the prefix yet (nothing to read)."""
        return self.layers[0][0].shape[-2] if self.layers else 0


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
    layer = module.layer_idx
    prefix = kv_prefix.layers[layer] if kv_prefix.tokens else None
    parents = kv_prefix.parents if kv_prefix.parents is not None and kv_prefix.parents.tokens else None
    scores = []  # each [B, H, G, N_part] in float32, one softmax over all of them
    if prefix is not None:
        scores.append(_per_head(q, prefix[0].transpose(-1, -2)))  # [B, H, G, P]
    if parents is not None:
        scores.append(_parent_scores(q, parents, layer))
    scores.append(_suffix_scores(q, key, attention_mask))
    weights = torch.softmax(torch.cat(scores, dim=-1) * scale, dim=-1).to(value.dtype)  # [B, H, G, N]
    pieces = weights.split([part.shape[-1] for part in scores], dim=-1)
    out = product(pieces[-1], value)  # [B, H, G, D] float32: the rows' own tokens
    if prefix is not None:
        out += _per_head(pieces[0], prefix[1])
    if parents is not None:
        out += _parent_values(pieces[-2], parents, layer)
    return out.to(query.dtype).reshape(batch, 1, heads_q, dim), None  # [B, Q=1, Hq, D]


def _per_head(rows: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """`rows` `[B, H, G, X]` times one matrix per head, `matrix` `[H, X, Y]`, in one product over every row: the
    shared prefix (its keys for the scores, its values for the output) is read once, not once per row."""
    batch, heads, group, extent = rows.shape
    flat = rows.permute(1, 0, 2, 3).reshape(heads, batch * group, extent)  # [H, B*G, X]
    return product(flat, matrix).view(heads, batch, group, -1).permute(1, 0, 2, 3)  # [B, H, G, Y]


def _parent_scores(q: torch.Tensor, parents: ParentHistory, layer: int) -> torch.Tensor:
    """Each parent's sibling queries against its history `[G', H, Wp, D]` in one batched product: `[B, H, G, Wp]`,
    -inf where a parent is shorter than Wp."""
    k = parents.layers[layer][0]
    scores = product(_to_parents(q, parents), k.transpose(-1, -2))  # [G', H, M*G, Wp]
    if parents.mask is not None:
        scores = torch.where(parents.mask[:, None, None, :], scores, float("-inf"))
    return _to_rows(scores, parents, q.shape[2])


def _parent_values(weights: torch.Tensor, parents: ParentHistory, layer: int) -> torch.Tensor:
    """`[B, H, G, D]` from the rows' weights `[B, H, G, Wp]` on their parents' values `[G', H, Wp, D]`."""
    v = parents.layers[layer][1]
    return _to_rows(product(_to_parents(weights, parents), v), parents, weights.shape[2])


def _to_parents(rows: torch.Tensor, parents: ParentHistory) -> torch.Tensor:
    """`[B, H, G, X]` per row to `[G', H, M*G, X]` per parent: row r is query slot `slots[r]`; unused slots are 0."""
    _, heads, group, extent = rows.shape
    count, width = parents.parents, parents.width
    if parents.slots is not None:
        rows = rows.new_zeros((count * width, heads, group, extent)).index_copy_(0, parents.slots, rows)
    return rows.reshape(count, width, heads, group, extent).transpose(1, 2).reshape(count, heads, width * group, extent)


def _to_rows(slots: torch.Tensor, parents: ParentHistory, group: int) -> torch.Tensor:
    """`[G', H, M*G, X]` per parent back to `[B, H, G, X]` per row (`_to_parents` reversed)."""
    count, heads, _, extent = slots.shape
    rows = slots.view(count, heads, parents.width, group, extent).transpose(1, 2)
    rows = rows.reshape(count * parents.width, heads, group, extent)
    return rows if parents.slots is None else rows.index_select(0, parents.slots)


def _suffix_scores(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The rows against their own tokens `[B, H, S, D]`: `[B, H, G, S]`, -inf on padding."""
    scores = product(q, k.transpose(-1, -2))  # [B, H, G, S]
    if mask is not None:  # [B, 1, 1, S] (True: attend) or additive
        allowed = mask if mask.dtype == torch.bool else mask == 0
        scores = torch.where(allowed[..., -scores.shape[-1] :], scores, float("-inf"))
    return scores

def padding_mask(lengths: Sequence[int], width: int, device) -> torch.Tensor | None:
    """`[B, W]` with 1 on each row's own columns (right-aligned), or None when no row is padded: the decode loop
    does not read a mask to find out (a host sync on CUDA), so a group of equal rows gives none."""
    if width == 0 or all(length == width for length in lengths):
        return None
    mask = torch.zeros((len(lengths), width), dtype=torch.long, device=device)
    for row, length in enumerate(lengths):
        mask[row, width - length :] = 1
    return mask


def product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` in float32, for `a` `[..., m, k]` and `b` `[..., k, n]` with the same leading dimensions.

    A bf16 product rounded to bf16 before it is widened loses a score of 15 to 1/16, 6% in its weight; SDPA's
    kernels keep scores in float32, and so does this. On CUDA one batched product reads bf16 and writes float32
    (`torch.bmm(..., out_dtype=torch.float32)`): widening the operands first would write and read the rows' keys
    again in float32, 5x their bytes, every layer of every token. Elsewhere the operands are widened (a no-op for
    float32)."""
    if not _float32_products(a.device, a.dtype):
        return torch.matmul(a.float(), b.float())
    lead = a.shape[:-2]
    out = torch.bmm(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]), out_dtype=torch.float32)
    return out.view(*lead, a.shape[-2], b.shape[-1])


@functools.cache
def _float32_products(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether `torch.bmm` gives float32 from `dtype` operands on `device` (CUDA, bf16 or fp16; asked once)."""
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        return False
    try:  # shaped as the products are: several matrices, the second one a transposed view
        a, b = torch.ones((2, 3, 8), dtype=dtype, device=device), torch.ones((2, 5, 8), dtype=dtype, device=device)
        return torch.bmm(a, b.transpose(1, 2), out_dtype=torch.float32).dtype == torch.float32
    except (RuntimeError, TypeError, NotImplementedError):  # a torch without `out_dtype` for this device
        return False


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
