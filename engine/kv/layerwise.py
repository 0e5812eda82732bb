"""The layer-wise offloading baseline (FlexGen, transformers' offloaded cache), with exact traffic.

All candidates advance together token by token. The first `L_in(s)` layers' KV stays on the
device; every other layer's KV is copied to the device for *every token* and the new token's
KV is written back (the paper's Eq. 1-3). When not every layer fits, two layers of the
budget are held back as staging buffers for the streamed layers, so with `B = budget`:

    L_in(s) = L                                   if floor(B / KV_layer(s)) >= L
            = max(0, floor(B / KV_layer(s)) - 2)  otherwise

Rows are candidates; between steps rows are re-selected by parent on the tier where each
layer lives (device-to-device or host-to-host, never across PCIe).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from engine.executor import GroupDone, Live, StepTiming
from engine.kv.blocks import BlockManager, Tier
from engine.kv.store import KVStore
from engine.runner import Row, StepRules, decode_step
from engine.scheduling import Group

STAGING_LAYERS = 2


def concat(past: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """`torch.cat` along the token axis; shape-only for meta tensors (plan-only runs), where cat is slow."""
    if past.is_meta:
        shape = (*past.shape[:-2], past.shape[-2] + new.shape[-2], past.shape[-1])
        return torch.empty(shape, dtype=past.dtype, device="meta")
    return torch.cat([past, new], dim=-2)


def resident_layers(budget: int, layer_bytes: int, num_layers: int) -> int:
    """Eq. 1, with two staging layers held back when not every layer fits."""
    fit = budget // layer_bytes if layer_bytes else num_layers
    return num_layers if fit >= num_layers else max(0, fit - STAGING_LAYERS)


class StreamedLayer(DynamicLayer):
    """A cache layer whose KV lives on the host and crosses to the device for each forward."""

    def __init__(self, store: KVStore, keys: torch.Tensor, values: torch.Tensor, owners: Sequence[int]) -> None:
        super().__init__()
        self.store, self.owners = store, list(owners)
        self.keys, self.values = keys, values  # [B, H, T, D], on the host
        self.dtype, self.device = keys.dtype, store.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        store, owners = self.store, self.owners
        keys = concat(store.transfer(self.keys, "h2d", owners), key_states)
        values = concat(store.transfer(self.values, "h2d", owners), value_states)
        self.keys = concat(self.keys, store.transfer(key_states, "d2h", owners))
        self.values = concat(self.values, store.transfer(value_states, "d2h", owners))
        return keys, values

    def get_seq_length(self) -> int:
        return self.keys.shape[-2]


class LayerwiseExecutor:
    """Keeps every candidate's KV as per-layer tensors `[B, H, T, D]`, split between device and host."""

    def __init__(self, model: torch.nn.Module, blocks: BlockManager, store: KVStore, budget: int) -> None:
        self.model, self.blocks, self.store, self.budget = model, blocks, store, budget
        self.num_layers = store.shape[0]
        self.layer_token_bytes = store.token_bytes // self.num_layers
        self.cache = DynamicCache(config=model.config)
        self.mask = torch.ones((1, 0), dtype=torch.long, device=store.device)  # [B, T]: 1 marks real KV
        self.rows: list[int] = []  # the candidate id of each row

    def start(self, prompt_id: int, prompt_cache: DynamicCache) -> None:
        """Take the prompt's KV (batch 1, computed on the device) as the single initial row."""
        self.rows = [prompt_id]
        self.cache = prompt_cache
        self.mask = torch.ones((1, prompt_cache.get_seq_length()), dtype=torch.long, device=self.store.device)

    def layer_bytes(self, rows: int | None = None) -> int:
        """KV_layer(s): one layer's KV for all rows at the current length."""
        rows = len(self.rows) if rows is None else rows
        return rows * self.cache.get_seq_length() * self.layer_token_bytes

    def _place(self, rows: int | None = None) -> int:
        """Re-apply Eq. 1 at the current length: exactly the first L_in(s) layers on the device."""
        wanted = resident_layers(self.budget, self.layer_bytes(rows), self.num_layers)
        for index, layer in enumerate(self.cache.layers):
            streamed = isinstance(layer, StreamedLayer)
            if index >= wanted and not streamed:
                keys = self.store.transfer(layer.keys, "d2h", self.rows)
                values = self.store.transfer(layer.values, "d2h", self.rows)
                self.cache.layers[index] = StreamedLayer(self.store, keys, values, self.rows)
            elif index < wanted and streamed:
                resident = DynamicLayer()
                resident.lazy_initialization(layer.keys, layer.values)
                resident.keys = self.store.transfer(layer.keys, "h2d", self.rows)
                resident.values = self.store.transfer(layer.values, "h2d", self.rows)
                self.cache.layers[index] = resident
            elif streamed:
                layer.owners = list(self.rows)
        return wanted

    def _select_rows(self, sources: Sequence[int]) -> None:
        """Rows for this step's candidates: a copy of the parent's row, on the tier the layer is on."""
        index = torch.tensor([self.rows.index(s) for s in sources])
        for layer in self.cache.layers:
            tier = "h2h" if isinstance(layer, StreamedLayer) else "d2d"
            layer.keys = self.store.select(layer.keys, index, tier)
            layer.values = self.store.select(layer.values, index, tier)
        self.mask = self.mask[index.to(self.mask.device)]

    def _before_forward(self, timing: StepTiming) -> None:
        wanted = self._place()
        resident = wanted + min(STAGING_LAYERS, self.num_layers - wanted)
        timing.peak_device_bytes = max(timing.peak_device_bytes, resident * self.layer_bytes())

    def run_step(
        self,
        groups: Sequence[Group],
        live: dict[int, Live],
        rules: StepRules,
        share: bool,
        timing: StepTiming,
        should_stop: Callable[[], bool],
    ) -> Iterator[GroupDone]:
        candidates = [c for g in groups for c in g.candidates]
        self._place(rows=len(candidates))  # evict before the rows multiply, so fewer bytes cross
        self._select_rows([live[c].source for c in candidates])
        self.rows = candidates
        mask, width = self.mask, self.mask.shape[1]
        rows = [Row(c, live[c].pending, self.blocks.num_tokens(live[c].table), live[c].generator) for c in candidates]
        hook = lambda: self._before_forward(timing)  # noqa: E731
        results, compute = decode_step(self.model, self.cache, mask, rows, rules, should_stop, hook)
        timing.compute_seconds += compute
        timing.modelled_stall_seconds += self.store.counters.step["h2d"] / self.store.bandwidth
        grown = self.cache.get_seq_length() - width
        self.mask = torch.cat([mask, torch.zeros((len(rows), grown), dtype=mask.dtype, device=mask.device)], dim=1)
        for row, (c, result) in enumerate(zip(candidates, results, strict=True)):
            self.mask[row, width : width + len(result.fed)] = 1
            live[c].table = self.blocks.append(live[c].table, result.fed, Tier.HOST).table
            if result.sampled:
                live[c].pending = result.sampled[-1]
            timing.group_of[c] = 0
        yield GroupDone(0, Group(tuple(candidates)), dict(zip(candidates, results, strict=True)))

    def resident_share(self) -> float:
        """The share of every candidate's KV on the device: resident layers over all layers."""
        resident = sum(1 for layer in self.cache.layers if not isinstance(layer, StreamedLayer))
        return resident / self.num_layers

    def tier_bytes(self) -> tuple[int, int]:
        """(device, host) bytes of all rows' KV."""
        device = host = 0
        for layer in self.cache.layers:
            size = layer.keys.nbytes + layer.values.nbytes if layer.is_initialized else 0
            if isinstance(layer, StreamedLayer):
                host += size
            else:
                device += size
        return device, host

    def min_budget(self, rows: int, step_tokens: int) -> int:
        """Two staging layers at the step's final length: below this, nothing can stream."""
        return STAGING_LAYERS * rows * (self.cache.get_seq_length() + step_tokens) * self.layer_token_bytes
