"""The layer-wise offloading baseline (FlexGen, transformers' offloaded cache), with exact traffic.

All candidates advance together token by token. The first `L_in(s)` layers' KV stays on the
device; every other layer's KV is copied to the device for *every token* and the new token's
KV is written back (the paper's Eq. 1-3). Streamed layers pass through two device staging
buffers, which are held back from the budget, so with `B = budget`:

    L_in(s) = L                                   if floor(B / KV_layer(s)) >= L
            = max(0, floor(B / KV_layer(s)) - 2)  otherwise

While one streamed layer computes, the next one is copied into the other staging buffer (on
the copy stream on CUDA). Every buffer is allocated once per step at the step's final length,
and a token's KV is written into its column in place: nothing is reallocated per token.
Rows are candidates; between steps rows are re-selected by parent on the tier where each
layer lives (device-to-device or host-to-host, never across PCIe).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from engine.errors import KVBudgetTooSmall
from engine.kv.blocks import Tier
from engine.kv.policy import Group, GroupDone, Live, PolicyContext, StepPlan, StepTiming, Work, idle_slots
from engine.rows import Row

STAGING_LAYERS = 2


def resident_layers(budget: int, layer_bytes: int, num_layers: int) -> int:
    """Eq. 1, with the staging layers held back when not every layer fits."""
    fit = budget // layer_bytes if layer_bytes else num_layers
    return num_layers if fit >= num_layers else max(0, fit - STAGING_LAYERS)


def paper_h2d_bytes(budget: int, rows: int, layer_token_bytes: int, num_layers: int, first: int, tokens: int) -> int:
    """Eq. 1-3 as the paper writes them (no staging held back), for KV lengths `first .. first + tokens - 1`."""
    total = 0
    for s in range(first, first + tokens):
        kv_layer = rows * s * layer_token_bytes
        fit = min(num_layers, budget // kv_layer) if kv_layer else num_layers
        total += (num_layers - fit) * kv_layer
    return total


class LayerKV(DynamicLayer):
    """One layer's KV for every row: `[B, H, cap, D]` buffers on the device or the host, `length` filled."""

    def __init__(self, owner: LayerwisePolicy, index: int, keys: torch.Tensor, values: torch.Tensor, length: int):
        super().__init__()
        self.owner, self.index, self.length = owner, index, length
        self.buffers = (keys, values)
        self.dtype, self.device = keys.dtype, owner.store.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return self.owner.update(self, key_states, value_states)

    def get_seq_length(self) -> int:
        return self.length


class LayerwisePolicy:
    """Keeps every candidate's KV as per-layer buffers, the first `L_in(s)` on the device."""

    name = "layerwise"
    home = Tier.HOST

    def __init__(self, context: PolicyContext, budget: int) -> None:
        self.context, self.store, self.budget = context, context.store, budget
        self.num_layers = self.store.slot_shape[0]
        self.layer_token_bytes = self.store.token_bytes // self.num_layers
        self.layers: list[LayerKV] = []
        self.resident = self.num_layers  # L_in(s): layers [0, resident) are on the device
        self.rows: list[int] = []  # the candidate id of each row
        self.mask = torch.ones((1, 0), dtype=torch.long, device=self.store.device)  # [B, T]: 1 marks real KV
        self.staging: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.staged: dict[int, object] = {}  # layer index -> load event (CUDA) or None, for the current token

    # -- the prompt and the plan ------------------------------------------------------------
    def start(self, prompt_id: int, prompt_cache: DynamicCache) -> None:
        """Take the prompt's KV (batch 1, computed on the device) as the single initial row."""
        self.rows = [prompt_id]
        length = prompt_cache.get_seq_length()
        self.layers = [
            LayerKV(self, i, layer.keys, layer.values, length) for i, layer in enumerate(prompt_cache.layers)
        ]
        self.mask = torch.ones((1, length), dtype=torch.long, device=self.store.device)

    def plan(self, work: Sequence[Work], budget: int) -> StepPlan:
        self.budget = budget
        need = self.min_budget(len(work), self.context.step_tokens)
        if need > budget:
            raise KVBudgetTooSmall(budget, need, "two layers of every candidate (layerwise)")
        return StepPlan("layerwise", (Group(tuple(w.id for w in work)),))

    def min_budget(self, rows: int, step_tokens: int) -> int:
        """Two staging layers at the step's final length: below this, nothing can stream."""
        return STAGING_LAYERS * rows * (self.length + step_tokens) * self.layer_token_bytes

    @property
    def length(self) -> int:
        return self.layers[0].length if self.layers else 0

    def layer_bytes(self, rows: int | None = None) -> int:
        """KV_layer(s): one layer's KV for all rows at the current length."""
        return (len(self.rows) if rows is None else rows) * self.length * self.layer_token_bytes

    # -- one step -----------------------------------------------------------------------------
    def run_step(
        self, plan: StepPlan, live: dict[int, Live], timing: StepTiming, should_stop: Callable[[], bool]
    ) -> Iterator[GroupDone]:
        candidates = [c for g in plan.groups for c in g.candidates]
        self._place(rows=len(candidates))  # evict before the rows multiply, so fewer bytes cross
        self._select_rows([live[c].source for c in candidates], self.length + self.context.step_tokens)
        self.rows = candidates
        width = self.length
        blocks = self.context.blocks
        rows = [Row(c, live[c].pending, blocks.num_tokens(live[c].table), live[c].generator) for c in candidates]
        mask = self.mask
        cache = DynamicCache(config=self.context.config)
        cache.layers = list(self.layers)
        hook = lambda: self._before_forward(timing)  # noqa: E731
        results, compute = self.context.decode(cache, mask, rows, should_stop, hook)
        self.store.sync()
        timing.compute_seconds += compute
        timing.idle_row_slots += idle_slots(results)
        timing.modelled_stall_seconds += self.store.counters.step["h2d"] / self.store.bandwidth
        grown = self.length - width
        self.mask = torch.cat([mask, torch.zeros((len(rows), grown), dtype=mask.dtype, device=mask.device)], dim=1)
        for row, (c, result) in enumerate(zip(candidates, results, strict=True)):
            self.mask[row, width : width + len(result.fed)] = 1
            live[c].table = self.context.blocks.append(live[c].table, result.fed, Tier.HOST).table
            if result.sampled:
                live[c].pending = result.sampled[-1]
            timing.group_of[c] = 0
        self.staging = []
        yield GroupDone(0, Group(tuple(candidates)), dict(zip(candidates, results, strict=True)))

    def _select_rows(self, sources: Sequence[int], capacity: int) -> None:
        """Rows for this step's candidates, each a copy of its parent's row, in buffers sized for the step."""
        index = torch.tensor([self.rows.index(s) for s in sources])
        for layer in self.layers:
            tier = "d2d" if layer.index < self.resident else "h2h"
            layer.buffers = tuple(self._select(buf, index, layer.length, capacity, tier) for buf in layer.buffers)
        self.mask = self.mask[index.to(self.mask.device)]
        self.staging = []

    def _select(self, buf: torch.Tensor, index: torch.Tensor, length: int, capacity: int, direction: str):
        _, H, _, D = buf.shape
        out = self._empty((len(index), H, capacity, D), on_device=direction == "d2d", like=buf)
        part = out[:, :, :length]
        if not part.is_meta:
            torch.index_select(buf[:, :, :length], 0, index.to(buf.device), out=part)
        self.store.counters.add(direction, part.numel() * part.element_size())
        return out

    def _ensure_staging(self) -> None:
        """Two device buffers at the step's final length, made once per step when a layer first streams."""
        if self.staging or self.resident == self.num_layers:
            return
        B, H, capacity, D = self.layers[0].buffers[0].shape
        make = lambda: torch.empty((B, H, capacity, D), dtype=self.store.dtype, device=self.store.device)  # noqa: E731
        self.staging = [(make(), make()) for _ in range(STAGING_LAYERS)]

    def _empty(self, shape, *, on_device: bool, like: torch.Tensor) -> torch.Tensor:
        if on_device:
            return torch.empty(shape, dtype=like.dtype, device=self.store.device)
        host = "meta" if like.is_meta else "cpu"
        return torch.empty(shape, dtype=like.dtype, device=host, pin_memory=self.store.pin)

    def _before_forward(self, timing: StepTiming) -> None:
        self._place()
        resident = self.resident + min(STAGING_LAYERS, self.num_layers - self.resident)
        timing.peak_device_bytes = max(timing.peak_device_bytes, resident * self.layer_bytes())
        self.staged = {}
        self._ensure_staging()
        if self.resident < self.num_layers:
            self.staged[self.resident] = self._load(self.resident)

    def _place(self, rows: int | None = None) -> None:
        """Re-apply Eq. 1 at the current length: exactly the first L_in(s) layers on the device."""
        wanted = resident_layers(self.budget, self.layer_bytes(rows), self.num_layers)
        for layer in self.layers:
            if wanted <= layer.index < self.resident:
                layer.buffers = tuple(self._move(buf, layer.length, "d2h") for buf in layer.buffers)
            elif self.resident <= layer.index < wanted:
                layer.buffers = tuple(self._move(buf, layer.length, "h2d") for buf in layer.buffers)
        self.resident = wanted

    def _move(self, buf: torch.Tensor, length: int, direction: str) -> torch.Tensor:
        out = self._empty(buf.shape, on_device=direction == "h2d", like=buf)
        self.store.copy(out[:, :, :length], buf[:, :, :length], direction, self.rows)
        return out

    # -- one layer of one token ---------------------------------------------------------------
    def _load(self, index: int):
        """Copy streamed layer `index` into its staging buffer; returns the copy's event (CUDA)."""
        layer = self.layers[index]
        keys, values = self.staging[index % STAGING_LAYERS]
        n = layer.length
        with self.store.loading() as done:
            self.store.copy(keys[:, :, :n], layer.buffers[0][:, :, :n], "h2d", self.rows)
            self.store.copy(values[:, :, :n], layer.buffers[1][:, :, :n], "h2d", self.rows)
        return done

    def update(self, layer: LayerKV, key_states: torch.Tensor, value_states: torch.Tensor):
        # key_states, value_states: [B, H, 1, D], the new token of every row
        n = layer.length
        if layer.index < self.resident:
            keys, values = layer.buffers
        else:
            self.store.wait_loaded(self.staged.pop(layer.index, None))
            keys, values = self.staging[layer.index % STAGING_LAYERS]
            self.store.copy(layer.buffers[0][:, :, n : n + 1], key_states, "d2h", self.rows)
            self.store.copy(layer.buffers[1][:, :, n : n + 1], value_states, "d2h", self.rows)
            following = layer.index + 1
            if following < self.num_layers:
                self.staged[following] = self._load(following)  # overlaps this layer's attention
        keys[:, :, n : n + 1].copy_(key_states)
        values[:, :, n : n + 1].copy_(value_states)
        layer.length = n + 1
        return keys[:, :, : n + 1], values[:, :, : n + 1]

    # -- reporting ------------------------------------------------------------------------------
    def placement(self, live: Live) -> tuple[int, int, int, int]:
        share = self.resident / self.num_layers
        total = self.context.blocks.num_tokens(live.table) * self.store.token_bytes
        table = live.table
        on_device = round(len(table) * share)
        return on_device, len(table) - on_device, round(total * share), total - round(total * share)

    def tier_bytes(self) -> tuple[int, int]:
        """(device, host) bytes of all rows' KV."""
        per_layer = self.layer_bytes()
        return self.resident * per_layer, (self.num_layers - self.resident) * per_layer
