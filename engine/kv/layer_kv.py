"""One layer's KV of every row as layer-wise offloading keeps it (engine/kv/layerwise.py): the model's cache layer,
its host buffers, a streamed layer's copies through its staging buffer, and a row taken out of it (saved on the
host, read per candidate) and put back."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from transformers.cache_utils import DynamicLayer

from engine.kv.layer_budget import STAGING_LAYERS
from engine.kv.pool import Run
from engine.kv.store import KVStore
from engine.kv.streams import filling_pinned_block

HOST_GROWTH_STEPS = 4  # a new host buffer has room for this many more steps


class LayerOwner(Protocol):
    """What a layer asks of its policy: the store (its device) and where a forward call's new tokens go."""

    store: KVStore

    def update(self, layer: LayerKV, key_states: torch.Tensor, value_states: torch.Tensor): ...


class LayerKV(DynamicLayer):
    """One layer's KV for every row, `kv` `[cap, 2, B, H, D]` on the device or the host, `length` filled.
    `run`: the device pool's run that holds `kv` (None on the host, or for the prompt's first row)."""

    def __init__(self, owner: LayerOwner, index: int, kv: torch.Tensor, length: int):
        super().__init__()
        self.owner, self.index, self.length, self.kv = owner, index, length, kv
        self.run: Run | None = None
        self.dtype, self.device = kv.dtype, owner.store.device
        self.is_initialized = True

    @classmethod
    def of_prompt(cls, owner: LayerOwner, index: int, layer: DynamicLayer, length: int) -> LayerKV:
        """Layer `index` of the prompt's cache (batch 1, `length` tokens) as the single initial row."""
        kv = torch.stack((layer.keys[0], layer.values[0])).permute(2, 0, 1, 3).unsqueeze(2)  # [P, 2, 1, H, D]
        return cls(owner, index, kv.contiguous(), length)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return self.owner.update(self, key_states, value_states)

    def get_seq_length(self) -> int:
        return self.length


@dataclass(frozen=True)
class SavedRow:
    """A row's KV on the host, `layers[i]` `[n, 2, H, D]` with `mask` `[n]` (its real columns), kept while its
    candidate is not decoded but a later step still forks it."""

    layers: list[torch.Tensor]
    mask: torch.Tensor

    @classmethod
    def take(cls, store: KVStore, layers: Sequence[LayerKV], row: int, resident: int, mask: torch.Tensor,
             source: int) -> SavedRow:  # fmt: skip
        """Row `row` of every layer copied into host buffers of its own (from the device for the first `resident`
        layers), with its mask `[B, T]`; its bytes go to `source`."""
        kept = []
        for layer in layers:
            kv = layer.kv[: layer.length, :, row]
            kept.append(store.host_empty(kv.shape, kv.dtype))
            store.copy(kept[-1], kv, "d2h" if layer.index < resident else "h2h", (source,))
        return cls(kept, mask[row].clone())

    def read(self) -> list[tuple[torch.Tensor, bool]]:
        """Its KV per layer as `read_row` gives a row's (every layer on the host)."""
        columns = self.mask.nonzero().flatten()
        return [(kv.index_select(0, columns.to(kv.device)).permute(1, 2, 0, 3), False) for kv in self.layers]


def heads_view(kv: torch.Tensor, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values `[B, H, tokens, D]` of a token-major buffer `[cap, 2, B, H, D]` (views, no copy)."""
    return kv[:tokens, 0].permute(1, 2, 0, 3), kv[:tokens, 1].permute(1, 2, 0, 3)


def host_buffer(store: KVStore, spares: list[torch.Tensor], capacity: int, tail: tuple[int, ...], like: torch.Tensor,
                step_tokens: int) -> torch.Tensor:  # fmt: skip
    """A host buffer `[cap, *tail]` holding `capacity` tokens: a spare if one fits (taken from `spares`), else one
    with room for a few more steps, or as many as fill the block torch's caching host allocator pins for it."""
    for i, spare in enumerate(spares):
        if spare.shape[1:] == tail and spare.shape[0] >= capacity:
            return spares.pop(i)
    tokens = capacity + HOST_GROWTH_STEPS * step_tokens
    tokens = filling_pinned_block(tokens, math.prod(tail) * like.element_size())  # a token of every row
    return store.host_empty((tokens, *tail), like.dtype)


def drop_spares(store: KVStore, spares: list[torch.Tensor], rows: int, capacity: int) -> None:
    """Free the spare host buffers with another row count than `rows` (the prompt's one row, or a search
    whose rows shrank) or shorter than `capacity`, this step's length (a layer's length only grows): no request
    of this run can reuse them, so their pinned memory goes back now, before the next layer's buffer is taken
    (torch's allocator would keep it)."""
    keep = [spare for spare in spares if spare.shape[2] == rows and spare.shape[0] >= capacity]
    if len(keep) < len(spares):
        spares[:] = keep
        store.release_host_cache()


def stream(store: KVStore, staging: Sequence[torch.Tensor], layers: Sequence[LayerKV], rows: Sequence[int],
           written: tuple[LayerKV, int, int] | None = None, load: int | None = None) -> dict[int, object]:  # fmt: skip
    """On the copy stream: write back the new tokens of a streamed layer (`(layer, first, count)`) from its staging
    buffer, then load streamed layer `load` into its staging buffer (`staging`: the two, by layer index). One
    contiguous copy each, their bytes to `rows`. Returns `{load: event}` (the load's CUDA event, None without
    CUDA) to wait for before reading it."""
    with store.loading() as done:
        if written is not None:
            layer, first, count = written
            staged = staging[layer.index % STAGING_LAYERS]
            store.copy(layer.kv[first : first + count], staged[first : first + count], "d2h", rows)
        if load is not None:
            layer = layers[load]
            n = layer.length
            store.copy(staging[load % STAGING_LAYERS][:n], layer.kv[:n], "h2d", rows)
    return {} if load is None else {load: done}


def restore_rows(store: KVStore, part: torch.Tensor, layer: int, restored: dict[int, SavedRow],
                 sources: Sequence[int], candidates: Sequence[int], on_device: bool) -> None:  # fmt: skip
    """Copy layer `layer` of each saved row into its new row `i` of `part` `[n, 2, B, H, D]` (`restored`: new row ->
    saved row of its source). A saved row crosses once; its other children copy it on the tier."""
    first: dict[int, int] = {}
    for i, saved in restored.items():
        kv, copied = saved.layers[layer], first.setdefault(sources[i], i)
        here = kv if copied == i else part[: len(kv), :, copied]
        crossing = "h2d" if on_device and copied == i else "d2d" if on_device else "h2h"
        store.copy(part[: len(kv), :, i], here, crossing, (candidates[i],))


def selected_mask(mask: torch.Tensor, index: torch.Tensor, restored: dict[int, SavedRow]) -> torch.Tensor:
    """The mask `[B, T]` of the rows selected by parent `index` `[B]` (on the mask's device), a restored row's
    its saved one."""
    mask = mask[index]
    for i, saved in restored.items():
        mask[i] = 0
        mask[i, : len(saved.mask)] = saved.mask
    return mask


def read_row(layers: Sequence[LayerKV], mask: torch.Tensor, row: int, resident: int
             ) -> list[tuple[torch.Tensor, bool]]:  # fmt: skip
    """Row `row`'s KV per layer, `[2, H, T, D]` in token order (its real columns in `mask` `[B, T]`), and whether
    the layer is on the device (one of the first `resident`)."""
    columns = mask[row].nonzero().flatten()
    out = []
    for layer in layers:
        kv = layer.kv[: layer.length].index_select(0, columns.to(layer.kv.device))[:, :, row]  # [T, 2, H, D]
        out.append((kv.permute(1, 2, 0, 3), layer.index < resident))
    return out
