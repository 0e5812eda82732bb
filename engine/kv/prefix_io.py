"""KV between one run's KV cache and the prefix cache: the cached prefix in before prefill, new blocks out after.

Every copy goes through the run's `KVStore.copy`, so the counters are exact: the cached prefix
crosses once host to device (`h2d`; head-wise, whose prompt lives on the host, `h2h`), and each
kept block once to the host (`d2h` from the device, `h2h` from the host pool). Layer-wise keeps
its rows in layer buffers, not blocks: a kept row is read from them (a padded row's columns are
gathered on their own tier first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import DynamicCache

from engine.kv.blocks import BlockManager, Tier
from engine.kv.prefix_cache import PrefixCache
from engine.kv.store import KVStore


def load_prefix(prefix: PrefixCache, body: Sequence[int], empty: Callable[..., torch.Tensor] | None = None
                ) -> tuple[list[bytes], torch.Tensor | None]:  # fmt: skip
    """Pin the keys of `body`'s full blocks for the run (checking the RAM cap holds them) and return them
    with the cached leading blocks' KV `[L, 2, H, cached, D]` on the host (None: no hit), gathered into
    `empty(shape, dtype)` when given (the store's pinned memory on CUDA: the entries stay pageable, since
    they outlive the run, but the gathered prefix then crosses PCIe in one asynchronous copy)."""
    keys = prefix.keys(body)
    prefix.require(len(keys))
    prefix.pin(keys)
    hits = prefix.lookup(body)
    prefix.trim()  # a block read from disk may have pushed the RAM tier past its cap
    if not hits:
        return keys, None
    parts = [entry.kv for entry in hits]
    if empty is None:
        return keys, torch.cat(parts, dim=3)
    shape = (*parts[0].shape[:3], sum(part.shape[3] for part in parts), parts[0].shape[4])
    return keys, torch.cat(parts, dim=3, out=empty(shape, parts[0].dtype))


def device_cache(store: KVStore, config, kv: torch.Tensor, owner: int) -> DynamicCache:
    """A model cache holding the cached prefix `[L, 2, H, T, D]` on the device (one counted h2d copy)."""
    on_device = torch.empty(kv.shape, dtype=kv.dtype, device=store.device)
    store.copy(on_device, kv, "h2d", [owner])
    cache = DynamicCache(config=config)
    for index in range(kv.shape[0]):
        cache.update(on_device[index, 0][None], on_device[index, 1][None], index)
    return cache


def keep_table(prefix: PrefixCache, blocks: BlockManager, store: KVStore, table: Sequence[int], owner: int) -> int:
    """Add the full blocks of `table` (held in `store`) to the prefix cache; returns how many were new."""

    def block_kv(block_id: int):
        def read() -> torch.Tensor:
            tier = store.tier_of(block_id)
            out = torch.empty(prefix.block_shape, dtype=store.dtype)
            store.copy(out, store.view(block_id, tier), "d2h" if tier is Tier.DEVICE else "h2h", [owner])
            store.sync()
            return out

        return read

    return _keep(prefix, blocks.tokens_of(table), [block_kv(b) for b in table])


def keep_layers(prefix: PrefixCache, store: KVStore, tokens: Sequence[int],
                layers: Sequence[tuple[torch.Tensor, bool]], owner: int) -> int:
    """Add the full blocks of a layer-wise row: `layers` holds each layer's `[2, H, T, D]` and whether
    that layer is on the device."""
    size = prefix.block_size

    def block_kv(index: int):
        def read() -> torch.Tensor:
            out = torch.empty(prefix.block_shape, dtype=store.dtype)
            for layer, (kv, on_device) in enumerate(layers):
                store.copy(out[layer], kv[:, :, index * size : (index + 1) * size], "d2h" if on_device else "h2h",
                           [owner])
            store.sync()
            return out

        return read

    return _keep(prefix, tokens, [block_kv(i) for i in range(len(tokens) // size)])


def _keep(prefix: PrefixCache, tokens: Sequence[int], readers) -> int:
    size, new = prefix.block_size, 0
    for depth, key in enumerate(prefix.keys(tokens)):
        new += prefix.add(key, depth, tokens[depth * size : (depth + 1) * size], readers[depth])
    prefix.trim()
    return new
