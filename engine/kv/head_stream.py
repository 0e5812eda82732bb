"""One group's past KV streamed to the device head group by head group, through two alternating buffers.

The past KV lives on the host in two parts: a shared prefix `[L, 2, H, P, D]` (read in place,
e.g. the prompt's run in the host pool) and the rows' own tokens `[L, 2, B, G, g, C, D]` (`G` head
groups of `g` heads; a host arena, left-padded). In memory the prefix is head-major (engine/kv/pool.py)
and the arena group-major (`[L, G, C, 2, B, g, D]`), and so are the device buffers: a head group's
prefix crosses PCIe as one contiguous, asynchronous copy per head (or one in all), its rows as one,
and a forward's new tokens as one per head group, never through PyTorch's pageable temporaries
(engine/kv/pieces.py).

For every forward call and every layer, `attend` walks the layer's head
groups of `g` KV heads: the group's prefix and rows are copied into one of two device buffers
(the next group is loaded into the other one while this one computes, on the copy stream on
CUDA), the forward's new K and V join them on the device, and attention runs for the query
heads of that group. The new K and V also go to the host arena (`write`), so after the forward
no KV of this layer is left on the device.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from engine.kv.store import KVStore

BUFFERS = 2  # one head group computes while the next is loaded


class HeadLayer(DynamicLayer):
    """A layer of the model's cache whose KV is on the host: `update` only writes the new tokens there."""

    def __init__(self, stream: HeadStream, index: int, filled: int) -> None:
        super().__init__()
        self.stream, self.index, self.filled = stream, index, filled
        self.dtype, self.device = stream.store.dtype, stream.store.device
        self.keys = self.values = torch.empty((0,), dtype=self.dtype, device=self.device)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        # key_states, value_states: [B, H, Q, D], this forward's tokens
        self.stream.write(self.index, self.filled, key_states, value_states)
        self.filled += key_states.shape[-2]
        return key_states, value_states

    def get_seq_length(self) -> int:
        return self.filled


class HeadStream:
    """Streams one group's host KV through two device buffers of `heads` KV heads each."""

    def __init__(
        self,
        store: KVStore,
        prefix: torch.Tensor | None,
        rows: torch.Tensor,
        filled: int,
        heads: int,
        owners: Sequence[int],
        prefix_tokens: int | None = None,
    ) -> None:
        # prefix: [L, 2, H, P, D] on the host, or None, of which attention reads the first `prefix_tokens` (default
        # all: a prefix copied with the unread tail of its run crosses in fewer pieces); rows: [L, 2, B, G, g, C, D]
        # on the host, `filled` columns written, with g == heads
        self.store, self.prefix, self.rows, self.heads, self.owners = store, prefix, rows, heads, list(owners)
        L, _, B, G, g, C, D = rows.shape
        assert g == heads, f"the rows are in groups of {g} heads, not {heads}"
        self.num_layers, self.num_groups = L, G
        P = 0 if prefix is None else prefix.shape[3]
        self.prefix_tokens = P if prefix_tokens is None else prefix_tokens
        shapes = [(BUFFERS, heads, P, 2, D), (BUFFERS, C, 2, B, heads, D)]  # as the prefix and the arena are
        (prefix_buffers, row_buffers), self.run = store.working(shapes)
        self.device_prefix = prefix_buffers.permute(0, 3, 1, 2, 4)  # [BUFFERS, 2, g, P, D]
        self.device_rows = row_buffers.permute(0, 2, 3, 4, 1, 5)  # [BUFFERS, 2, B, g, C, D]
        self.filled = filled
        self.past = filled  # columns of the rows part before the current forward's tokens
        self.staged: dict[int, object] = {}  # item (layer * groups + group) -> its load's event
        self.prefetched_bytes = 0  # loads issued while an earlier head group computed

    def cache(self, config) -> DynamicCache:
        cache = DynamicCache(config=config)
        cache.layers = [HeadLayer(self, i, self.filled) for i in range(self.num_layers)]
        return cache

    def close(self) -> None:
        self.staged.clear()
        self.store.release(self.run)

    # -- host side --------------------------------------------------------------------------
    def write(self, layer: int, column: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """The new tokens' K and V `[B, H, Q, D]` go to the host rows' columns from `column` (laid out on the
        device in the host's order first: one contiguous copy per head group of the arena)."""
        if layer == 0:
            self.past = column
        new = torch.stack((keys, values)).unflatten(2, (self.num_groups, self.heads))  # [2, B, G, g, Q, D]
        self.store.copy(self.rows[layer, :, :, :, :, column : column + keys.shape[2]], new, "d2h", self.owners)

    def _load(self, item: int):
        """Copy head group `item` (its prefix and its rows' past columns) into buffer `item % 2`."""
        layer, group = divmod(item, self.num_groups)
        heads = slice(group * self.heads, (group + 1) * self.heads)
        slot, n = item % BUFFERS, self.past
        with self.store.loading() as done:
            if self.prefix is not None and self.prefix.shape[3]:
                self.store.copy(self.device_prefix[slot], self.prefix[layer, :, heads], "h2d", self.owners)
            if n:
                target = self.device_rows[slot][:, :, :, :n]
                self.store.copy(target, self.rows[layer, :, :, group, :, :n], "h2d", self.owners)
        return done

    # -- one layer ----------------------------------------------------------------------------
    def attend(self, layer: int, query, key, value, mask, scale: float) -> torch.Tensor:
        """Attention of `layer` for `query` `[B, Hq, Q, D]`, head group by head group; returns `[B, Q, Hq, D]`."""
        per_kv = query.shape[1] // (self.num_groups * self.heads)  # query heads per KV head (GQA)
        out = torch.empty_like(query)
        last = self.num_layers * self.num_groups - 1
        for group in range(self.num_groups):
            item = layer * self.num_groups + group
            loaded = self.staged.pop(item) if item in self.staged else self._load(item)
            if item < last:
                before = self.store.counters.step["h2d"]
                self.staged[item + 1] = self._load(item + 1)  # overlaps this group's attention
                self.prefetched_bytes += self.store.counters.step["h2d"] - before
            self.store.wait_loaded(loaded)
            out[:, group * self.heads * per_kv : (group + 1) * self.heads * per_kv] = self._group(
                item, query, key, value, mask, scale
            )
        return out.transpose(1, 2)

    def _group(self, item: int, query, key, value, mask, scale: float) -> torch.Tensor:
        group = item % self.num_groups
        heads = slice(group * self.heads, (group + 1) * self.heads)
        per_kv = query.shape[1] // (self.num_groups * self.heads)
        slot, n, new = item % BUFFERS, self.past, key.shape[-2]
        rows = self.device_rows[slot]  # [2, B, g, C, D]
        rows[0, :, :, n : n + new] = key[:, heads]
        rows[1, :, :, n : n + new] = value[:, heads]
        q = query[:, heads.start * per_kv : heads.stop * per_kv]  # [B, g * G, Q, D]
        prefix = self.device_prefix[slot][:, :, : self.prefix_tokens] if self.prefix_tokens else None  # [2, g, P, D]
        return group_attention(q, prefix, rows[0, :, :, : n + new], rows[1, :, :, : n + new], mask, scale)


def group_attention(q, prefix, k, v, mask, scale: float) -> torch.Tensor:
    """Softmax attention of `q` `[B, g*G, Q, D]` over a shared `prefix` `[2, g, P, D]` (or None) and the rows'
    `k`, `v` `[B, g, S, D]`, merged exactly by log-sum-exp; `mask` is the model's `[B, 1, Q, S]` (None: causal)."""
    B, heads_q, Q, D = q.shape
    g = k.shape[1]
    G = heads_q // g
    rows = q.reshape(B, g, G * Q, D)  # query heads grouped by KV head, then positions
    out, lse = _softmax_part(rows, k, v, _allowed(mask, G, Q, k.shape[2], q.device), scale)
    if prefix is not None:
        out_p, lse_p = _softmax_part(rows, prefix[0], prefix[1], None, scale)  # the prefix is broadcast over rows
        total = torch.logaddexp(lse, lse_p)
        out = out * torch.exp(lse - total).unsqueeze(-1) + out_p * torch.exp(lse_p - total).unsqueeze(-1)
    return out.to(q.dtype).reshape(B, heads_q, Q, D)


def _softmax_part(rows, k, v, allowed, scale: float):
    scores = torch.matmul(rows, k.transpose(-1, -2)).float() * scale  # [B, g, G*Q, S]
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [B, g, G*Q]
    out = torch.matmul(torch.softmax(scores, dim=-1).to(v.dtype), v).float()  # [B, g, G*Q, D]
    return out, lse


def _allowed(mask, G: int, Q: int, S: int, device) -> torch.Tensor | None:
    """`[B or 1, 1, G*Q, S]` True where a query may attend, or None when every column may be read."""
    if mask is not None:  # [B, 1, Q, S'] boolean (True: attend) or additive (0: attend)
        allowed = (mask if mask.dtype == torch.bool else mask == 0)[..., -S:]
    elif Q > 1:  # no mask for a square causal chunk: query i sits at column S - Q + i
        allowed = torch.ones((Q, S), dtype=torch.bool, device=device).tril(S - Q)[None, None]
    else:
        return None
    batch = allowed.shape[0]
    return allowed[:, :, None].expand(batch, 1, G, Q, S).reshape(batch, 1, G * Q, S)
