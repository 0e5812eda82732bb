"""The layer-wise offloading baseline (FlexGen, transformers' offloaded cache), with exact traffic.

All candidates advance together token by token. The first `L_in(s)` layers' KV stays on the
device; every other layer's KV is copied to the device for *every token* and the new token's
KV is written back (the paper's Eq. 1-3). Streamed layers pass through two device staging
buffers, which are held back from the budget, so with `B = budget`:

    L_in(s) = L                                   if floor(B / KV_layer(s)) >= L
            = max(0, floor(B / KV_layer(s)) - 2)  otherwise

While one streamed layer computes, the next one is copied into the other staging buffer (on
the copy stream on CUDA). A layer's KV is stored token-major, `[T, 2, B, H, D]`, so its first
`n` tokens (keys and values of every row) are one contiguous block: streaming a layer is one
copy from pinned memory, and writing a token back is another, whatever the rows and heads.
Attention reads the buffers through strided views. Device layer and staging buffers are runs
of the one device pool (engine/kv/pool.py), taken at the step's final length and given back
when replaced, so no step allocates device memory; a host layer's rows are selected into the
buffer the layer before it gave up (one buffer beyond the layers, grown a few steps ahead); a
token's KV is written into its column in place: nothing is reallocated per token. Rows are
candidates; between steps rows are re-selected by parent on the tier where each layer lives
(device-to-device or host-to-host, never across PCIe). A parent that stays live while its row is
replaced (lookahead's child, whose roll-outs fork it) keeps its row on the host until a later
step forks it again (`SavedRow`).

Faults. The budget is re-read every step (engine/kv/cache.py): a shrink moves layers to the
host, a grow brings them back. A step that runs out of device memory (CUDA, or the pool)
is rewound to its start (every layer's length back to the step's first column, the staging
runs given back; tables and the mask change only after a step succeeds) and run again with a
working budget that keeps half as many layers resident; the layers that no longer fit move to
the host, and `timing.retries` says "resident layers A -> B". Only when no layer is resident
any more does the error go on. Bytes a failed attempt moved stay counted: they crossed PCIe.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence

import torch
from transformers import DynamicCache

from engine.errors import KVBudgetTooSmall
from engine.kv.blocks import Tier
from engine.kv.layer_budget import STAGING_LAYERS, lowered_residency, resident_layers, staging_bytes
from engine.kv.layer_kv import (
    LayerKV,
    SavedRow,
    drop_spares,
    heads_view,
    host_buffer,
    read_row,
    restore_rows,
    selected_mask,
    stream,
)
from engine.kv.policy import (
    OUT_OF_MEMORY,
    Group,
    GroupDone,
    Live,
    PolicyContext,
    StepPlan,
    StepTiming,
    Work,
    group_done,
)
from engine.kv.pool import PoolExhausted, Run
from engine.kv.streams import device_tensor
from engine.rows import Row, RowResult


class LayerwisePolicy:
    """Keeps every candidate's KV as per-layer buffers, the first `L_in(s)` on the device."""

    name = "layerwise"
    home = Tier.HOST

    def __init__(self, context: PolicyContext, budget: int, overhead: int = 0) -> None:
        """`budget`: Eq. 1's device bytes (re-read every step by `plan`); `overhead`: what the device
        pool holds beyond it (`pool_overhead`)."""
        self.context, self.store, self.budget, self.overhead = context, context.store, budget, overhead
        self.num_layers = self.store.slot_shape[0]
        self.layer_token_bytes = self.store.token_bytes // self.num_layers
        self.layers: list[LayerKV] = []
        self.resident = self.num_layers  # L_in(s): layers [0, resident) are on the device
        self.rows: list[int] = []  # the candidate id of each row
        self.prompt_id: int | None = None
        self.saved: dict[int, SavedRow] = {}  # live candidates with no row whose KV a later step forks
        self.capacity = 0  # tokens a layer holds by the end of the current step
        self.mask = torch.ones((1, 0), dtype=torch.long, device=self.store.device)  # [B, T]: 1 marks real KV
        self.staging: list[torch.Tensor] = []
        self.staging_run: Run | None = None  # the device run both staging buffers are carved from
        self.staged: dict[int, object] = {}  # layer index -> load event (CUDA) or None, for the current token
        self.spares: list[torch.Tensor] = []  # host buffers no layer uses, reused by the next step
        self.high = False  # the device layers' runs sit at the pool's high end (the next selection takes the low)

    # -- the prompt and the plan ------------------------------------------------------------
    def start(self, prompt_id: int, prompt_cache: DynamicCache) -> None:
        """Take the prompt's KV (batch 1, computed on the device) as the single initial row."""
        self.rows, self.prompt_id = [prompt_id], prompt_id
        length = prompt_cache.get_seq_length()
        self.layers = [LayerKV.of_prompt(self, i, layer, length) for i, layer in enumerate(prompt_cache.layers)]
        self.capacity = length
        self.mask = torch.ones((1, length), dtype=torch.long, device=self.store.device)

    def plan(self, work: Sequence[Work], budget: int) -> StepPlan:
        self.budget = budget
        need = self.min_budget(len(work), self.context.step_tokens)
        if need > budget:
            raise KVBudgetTooSmall(budget, need, "two layers of every candidate (layerwise)")
        return StepPlan("layerwise", (Group(tuple(w.id for w in work)),))

    def min_budget(self, rows: int, step_tokens: int) -> int:
        """Two staging layers at the step's final length: below this, nothing can stream."""
        return staging_bytes(rows, self.length + step_tokens, self.layer_token_bytes)

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
        sources = [live[c].source for c in candidates]
        loaded_before = self.store.counters.step["h2d"]  # a step's roll-outs (lookahead) run it again
        with torch.inference_mode():  # buffers made while decoding are reused here
            self._save_rows(sources, live)
            self._trim(sources)
            self.capacity = self.length + self.context.step_tokens
            self._limit_pool()  # a budget grown back lets layers return
            self._place(rows=len(candidates))  # evict before the rows multiply, so fewer bytes cross
            self._limit_pool()  # a budget shrunk: the pool's part in use follows once layers left
            self.store.sync()  # the host reads what was just evicted
            self._select_rows(candidates, sources, timing)
            self.saved = {c: saved for c, saved in self.saved.items() if c in live}  # released ones are done
        width = self.length
        try:
            results = self._decode(live, timing, should_stop)
        finally:
            self.store.sync()
            self._release_staging()
        timing.modelled_stall_seconds += (self.store.counters.step["h2d"] - loaded_before) / self.store.bandwidth
        grown = self.length - width
        mask = self.mask
        self.mask = torch.cat([mask, torch.zeros((len(results), grown), dtype=mask.dtype, device=mask.device)], dim=1)
        for row, (c, result) in enumerate(zip(candidates, results, strict=True)):
            self.mask[row, width : width + len(result.fed)] = 1
            live[c].table = self.context.blocks.append(live[c].table, result.fed, Tier.HOST).table
            if result.sampled:
                live[c].pending = result.sampled[-1]
        yield group_done(0, Group(tuple(candidates)), results, timing)

    def _decode(self, live: dict[int, Live], timing: StepTiming, should_stop: Callable[[], bool]) -> list[RowResult]:
        """Decode every row's step. An attempt that runs out of device memory is rewound to the step's
        start and run again with fewer resident layers (`_lower`): a row's draws depend only on its
        stream and position (engine/rng.py), so the retry samples the same tokens."""
        width, blocks = self.length, self.context.blocks
        rows = [Row(c, live[c].pending, blocks.num_tokens(live[c].table), live[c].generator) for c in self.rows]
        hook = functools.partial(self._before_forward, timing)
        # the rows' real columns live on the device (pruning and restored rows change them): one read a step
        mask = None if self.mask.is_meta or bool(self.mask.all()) else self.mask
        while True:
            cache = DynamicCache(config=self.context.config)
            cache.layers = list(self.layers)
            try:
                results, compute = self.context.decode(cache, mask, rows, should_stop, hook)
            except OUT_OF_MEMORY as error:
                self._rewind(width)
                self._lower(error, timing)
                continue
            timing.compute_seconds += compute
            return results

    def _rewind(self, width: int) -> None:
        """Undo a failed attempt: wait for its copies, give the staging run back, and every layer back to
        the step's first `width` columns (the ones after are written again; the mask and the tables
        change only after a step succeeds)."""
        self.store.sync()
        self._release_staging()
        self.staged = {}
        for layer in self.layers:
            layer.length = width

    def _lower(self, error: BaseException, timing: StepTiming) -> None:
        """Lower the working budget so that half as many layers stay resident (Eq. 1), move the others to
        the host and say so in `timing.retries`; `error` goes on when no residency holds less."""
        before = self.resident
        target = lowered_residency(before, self.num_layers)
        if target is None:
            raise error
        self.budget = (target + STAGING_LAYERS) * self.layer_bytes()
        with torch.inference_mode():
            self._place()
        self.store.sync()
        if self.resident >= before:  # nothing left to lower (a step at length 0)
            raise error
        reason = f"resident layers {before} -> {self.resident} ({type(error).__name__}: {error})"
        timing.retries.append((tuple(self.rows), reason))

    def _limit_pool(self) -> None:
        """The part of the device pool in use follows the budget (in whole slots, as the pool was sized;
        never below what is held now)."""
        self.store.limit_device(self.budget + self.overhead + self.store.block_bytes - 1)

    def _select_rows(self, candidates: Sequence[int], sources: Sequence[int], timing: StepTiming) -> None:
        """Rows for this step's candidates, each a copy of its parent's row, in buffers sized for the step.

        New device runs come from the other end of the pool than the old ones, layer after layer in
        the order that frees the old run nearest them first, so the pool needs room for one old layer
        beside the new ones. A layer that still finds no room goes to the host with every layer after
        it (a retry in `timing`); Eq. 1 brings them back at the first forward call that finds room.
        A host layer's old buffer takes the next host layer's rows (the host holds one buffer more than
        its layers, not two sets) when it has this step's rows and length, else it is freed; what is left
        over is spare for the next step."""
        parents = [self.rows.index(s) if s in self.rows else 0 for s in sources]  # each new row's row before the step
        index = torch.tensor(parents)  # [B], for host layers
        device_index = device_tensor(parents, torch.long, self.store.device)  # once a step, not a host stall per layer
        restored = {i: self.saved[s] for i, s in enumerate(sources) if s not in self.rows}  # rows 0 stand in
        spares, self.spares = self.spares, []
        from_end, failed, reason = not self.high, self.num_layers, None
        for layer in reversed(self.layers) if from_end else self.layers:
            on_device = layer.index < self.resident
            old, n, run = layer.kv, layer.length, None
            try:
                if on_device and layer.index < failed:
                    layer.kv, run = self._buffer(len(index), True, like=old, spares=spares, from_end=from_end)
            except PoolExhausted as error:
                failed, reason = layer.index, error
            if on_device and run is None:  # its old rows leave first, then are selected on the host
                self._move(layer, "d2h")
                self.store.sync()  # the host reads them below: the copy to the host must be done (CUDA)
                old, on_device = layer.kv, False
            if not on_device:
                layer.kv = self._buffer(len(index), False, like=old, spares=spares)[0]
            part = layer.kv[:n]
            if not part.is_meta:
                torch.index_select(old[:n], 2, device_index if on_device else index, out=part)
            row_bytes = part.numel() * part.element_size() // len(index)
            self.store.counters.add("d2d" if on_device else "h2h", row_bytes * (len(index) - len(restored)))
            restore_rows(self.store, part, layer.index, restored, sources, candidates, on_device)
            if on_device:
                self._release(layer)
                layer.run = run
            else:  # read: the next host layer's rows may go into it
                spares.append(old)
                del old
                drop_spares(self.store, spares, len(index), self.capacity)
        self.spares = spares
        self.high = from_end
        self.mask = selected_mask(self.mask, device_index, restored)  # the mask lives on the store's device
        self.rows = list(candidates)
        if reason is not None:
            self._keep_below(failed, timing, f"no room to select rows on the device ({reason})")

    def _save_rows(self, sources: Sequence[int], live: dict[int, Live]) -> None:
        """Keep on the host the rows of this step's sources that stay live while the step replaces their rows:
        lookahead's children, forked by their roll-outs and again by the next step (the search releases any
        other parent once forked; the prompt stays live but no later step forks it)."""
        for source in dict.fromkeys(sources):
            if source not in live or source == self.prompt_id or source in self.saved or source not in self.rows:
                continue
            self.saved[source] = SavedRow.take(self.store, self.layers, self.rows.index(source), self.resident,
                                               self.mask, source)  # fmt: skip

    def _trim(self, sources: Sequence[int]) -> None:
        """When every source's row was saved (the step after lookahead's roll-outs), the columns after the longest
        saved row hold only the roll-outs' KV: drop them, so that the layers do not grow by the roll-outs every
        step (Eq. 1 counts a layer's columns)."""
        if not sources or any(s not in self.saved or s in self.rows for s in sources):
            return
        width = max(len(self.saved[s].mask) for s in sources)
        for layer in self.layers:
            layer.length = min(layer.length, width)
        self.mask = self.mask[:, :width]

    def _keep_below(self, first: int, timing: StepTiming, why: str) -> None:
        """Layers from `first` on move to the host: the device holds a prefix of the layers."""
        before = self.resident
        for layer in self.layers[first:before]:
            if layer.run is not None:
                self._move(layer, "d2h")
        self.resident = min(before, first)
        timing.retries.append((tuple(self.rows), f"resident layers {before} -> {self.resident} ({why})"))

    def _buffer(self, rows: int, on_device: bool, like: torch.Tensor, spares: list[torch.Tensor],
                from_end: bool = False) -> tuple[torch.Tensor, Run | None]:  # fmt: skip
        """A `[cap, 2, rows, H, D]` buffer holding `self.capacity` tokens: on the device a run of the pool
        of exactly that (returned with it), on the host `host_buffer`'s."""
        tail = (2, rows, *like.shape[3:])
        if on_device:
            (kv,), run = self.store.working([(self.capacity, *tail)], from_end=from_end)
            return kv, run
        return host_buffer(self.store, spares, self.capacity, tail, like, self.context.step_tokens), None

    def _release(self, layer: LayerKV) -> None:
        """Give a layer's device run back to the pool (copies from it are ordered before any reuse)."""
        if layer.run is not None:
            self.store.release(layer.run)
            layer.run = None

    def _ensure_staging(self) -> None:
        """Two device buffers at the step's final length, one run of the pool at the end away from the
        layers, taken once per step when a layer first streams."""
        if self.staging or self.resident == self.num_layers:
            return
        _, _, B, H, D = self.layers[0].kv.shape
        shape = (self.capacity, 2, B, H, D)
        self.staging, self.staging_run = self.store.working([shape] * STAGING_LAYERS, from_end=not self.high)

    def _release_staging(self) -> None:
        self.staging = []
        if self.staging_run is not None:
            self.store.release(self.staging_run)
            self.staging_run = None

    def _before_forward(self, timing: StepTiming) -> None:
        self._place()
        resident = self.resident + min(STAGING_LAYERS, self.num_layers - self.resident)
        timing.peak_device_bytes = max(timing.peak_device_bytes, resident * self.layer_bytes())
        self.staged = {}
        self._ensure_staging()
        if self.resident < self.num_layers:
            self.staged = stream(self.store, self.staging, self.layers, self.rows, load=self.resident)

    def _place(self, rows: int | None = None) -> None:
        """Re-apply Eq. 1 at the current length: exactly the first L_in(s) layers on the device. A layer
        that finds no room in the pool stays on the host, and so do the ones after it."""
        wanted = resident_layers(self.budget, self.layer_bytes(rows), self.num_layers)
        for layer in self.layers[wanted : self.resident]:
            self._move(layer, "d2h")
        self.resident = min(self.resident, wanted)
        for layer in self.layers[self.resident : wanted]:
            try:
                self._move(layer, "h2d")
            except PoolExhausted:
                break
            self.resident = layer.index + 1

    def _move(self, layer: LayerKV, direction: str) -> None:
        """One layer to the other tier in one copy (a spare host buffer if one fits; a device run at the
        end of the pool where the layers are); a device run it leaves goes back to the pool, and a host buffer
        becomes a spare (its copy is ordered before any reuse: both are on the compute stream)."""
        n = layer.length
        out, run = self._buffer(layer.kv.shape[2], direction == "h2d", like=layer.kv, spares=self.spares,
                                from_end=self.high)  # fmt: skip
        self.store.copy(out[:n], layer.kv[:n], direction, self.rows)
        self._release(layer)
        if direction == "h2d":
            self.spares.append(layer.kv)
        layer.kv, layer.run = out, run

    # -- one layer of one token ---------------------------------------------------------------
    def update(self, layer: LayerKV, key_states: torch.Tensor, value_states: torch.Tensor):
        # key_states, value_states: [B, H, new, D], the new tokens of every row
        n, new = layer.length, key_states.shape[-2]
        streamed = layer.index >= self.resident
        if streamed:
            self.store.wait_loaded(self.staged.pop(layer.index, None))
        kv = self.staging[layer.index % STAGING_LAYERS] if streamed else layer.kv
        kv[n : n + new, 0].copy_(key_states.permute(2, 0, 1, 3))
        kv[n : n + new, 1].copy_(value_states.permute(2, 0, 1, 3))
        layer.length = n + new
        if streamed:
            following = layer.index + 1 if layer.index + 1 < self.num_layers else None
            written = stream(self.store, self.staging, self.layers, self.rows, (layer, n, new), following)
            self.staged.update(written)  # overlaps this layer's attention
        return heads_view(kv, n + new)

    def row_kv(self, candidate: int) -> list[tuple[torch.Tensor, bool]] | None:
        """The candidate's KV per layer, `[2, H, T, D]` in token order (its row's real columns), and whether
        the layer is on the device; None when it has no row (it was not decoded in the last step)."""
        saved = self.saved.get(candidate)
        if saved is not None:
            return saved.read()
        if candidate not in self.rows:
            return None
        return read_row(self.layers, self.mask, self.rows.index(candidate), self.resident)

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
