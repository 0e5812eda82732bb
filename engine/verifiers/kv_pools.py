"""The verifier's KV in pools of its own shape: a device pool held to its share of the KV budget, a host pool.

The verifier's model is not the generator's, so its KV has its own geometry `[L, 2, H_kv, block, D]`
and lives in its own `SlotPool`s. A path segment (the question, or one step) is a run of slots on
the device or the host. A verification batch runs in an *arena* `[L, 2, B, H_kv, W, D]` carved from
the device pool too, so segments at rest and the batch at work never pass the verifier's device
budget together: to make room, the least recently used segments move to the host, and a batch
whose arena cannot fit even in an empty pool is refused with the budget that would hold it.
Every copy is counted in bytes (exactly its tokens x bytes per token) and in calls, by direction,
for the step and for the run. Loads into an arena may run on a copy stream (`loading()`, CUDA), as
the generator's store does; on the CPU they run at once and their PCIe time is modelled from the bytes.
The CUDA operations (copy stream, events, pinned host memory, asynchronous copies) come from the same
seam as the store's (engine/kv/streams.py), so tests run the CUDA branches on the CPU through a fake.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.kv.blocks import Tier
from engine.kv.pool import PoolExhausted, Run, SlotPool
from engine.kv.split import share_too_small
from engine.kv.store import HOST_CHUNK_BYTES, Counters, counted_copy
from engine.kv.streams import on_copy_stream, streams_for, wait_for_copy_stream
from engine.verifiers.base import VerifierMemory

UNBUDGETED_CHUNK_BYTES = 64 << 20  # a verifier without a budget grows its device pool by this much


@dataclass
class Segment:
    tier: Tier
    run: Run
    tokens: int


class VerifierKV:
    """Segments of the verifier's KV tree and the arenas its batches run in, within `budget_bytes` on the device.

    `budget_bytes=None`: no budget (the device pool grows as needed; nothing moves to the host).
    """

    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        *,
        budget_bytes: int | None = None,
        block_size: int = 16,
        pcie_gbps: float = 25.0,
    ) -> None:
        self.slot_shape = (num_layers, 2, num_kv_heads, block_size, head_dim)
        self.block_size, self.budget_bytes = block_size, budget_bytes
        self.token_bytes = 2 * num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()
        self.block_bytes = self.token_bytes * block_size
        self.streams = streams_for(device)  # None: no CUDA, copies run at once
        if budget_bytes is None:
            device_pool = SlotPool(
                self.slot_shape, dtype, device, capacity=0, chunk=max(1, UNBUDGETED_CHUNK_BYTES // self.block_bytes)
            )
        else:
            device_pool = SlotPool(self.slot_shape, dtype, device, capacity=budget_bytes // self.block_bytes)
        self.pools = {
            Tier.DEVICE: device_pool,
            Tier.HOST: SlotPool(
                self.slot_shape,
                dtype,
                torch.device("cpu"),
                capacity=0,
                pin=self.streams is not None,
                chunk=max(1, HOST_CHUNK_BYTES // self.block_bytes),
                empty=None if self.streams is None else lambda n: self.streams.empty_host((n,), dtype),
                layout="token",  # a segment's tokens are one contiguous piece: its copies cross asynchronously
                fill_pinned=True,
            ),
        }
        self.segments: dict[int, Segment] = {}
        self._written: set[int] = set()  # host segments an asynchronous copy may still be writing (CUDA)
        self._on_device: dict[int, None] = {}  # device segments, least recently used first
        self._next = 0
        self.counters = Counters()  # bytes and copy calls per direction, this step and over the run
        self.bandwidth = pcie_gbps * 1e9  # modelled PCIe bytes per second (the CPU)
        self.stall_seconds = 0.0  # modelled (CPU): loads compute waited for, over the run
        self.copy_stream = None if self.streams is None else self.streams.copy_stream
        self.peak_slots = 0

    # -- segments -----------------------------------------------------------------------------
    def put(self, kv: torch.Tensor) -> int:
        """Keep `kv` `[l, 2, H, T, D]` (on the device) as a new segment: on the device while there is room.
        With `l` under the model's layers the slots still hold every layer; `write` fills the rest later."""
        tokens = kv.shape[3]
        slots = self._slots(tokens)
        try:
            segment = Segment(Tier.DEVICE, self.pools[Tier.DEVICE].allocate(slots), tokens)
        except PoolExhausted:
            segment = Segment(Tier.HOST, self.pools[Tier.HOST].allocate(slots), tokens)
        handle, self._next = self._next, self._next + 1
        self.segments[handle] = segment
        if segment.tier is Tier.DEVICE:
            self._on_device[handle] = None
        self.write(handle, kv)
        self._note_peak()
        return handle

    def write(self, handle: int, kv: torch.Tensor, first_layer: int = 0) -> None:
        """Copy `kv` `[l, 2, H, T, D]` (on the device) into the segment's layers `first_layer`.. `first_layer + l`."""
        segment = self.segments[handle]
        dst = self._view(segment)[first_layer : first_layer + kv.shape[0]]
        self._copy(dst, kv, "d2d" if segment.tier is Tier.DEVICE else "d2h")
        self._note_written(handle)

    def load(self, handle: int, dst: torch.Tensor) -> None:
        """Copy the segment into `dst` `[L, 2, H, T, D]` on the device (host segments cross PCIe).

        On CUDA a host segment still being written waits for every stream first: the write may have been
        issued on the other stream, not ordered before this load (a safety: the host side is contiguous
        pieces, so the copy itself is in stream order, never read by the host when issued)."""
        segment = self.segments[handle]
        self.touch(handle)
        if handle in self._written:
            self.streams.synchronize()
            self._written.clear()
        self._copy(dst, self._view(segment), "d2d" if segment.tier is Tier.DEVICE else "h2d")

    def touch(self, handle: int) -> None:
        """The segment was read: on the device, it is the most recently used now."""
        if handle in self._on_device:
            self._on_device[handle] = self._on_device.pop(handle)

    def copy_columns(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """A device-to-device copy of KV already on the device (a kept prefix handed to the next arena)."""
        self._copy(dst, src, "d2d")

    def free(self, handles: Sequence[int]) -> None:
        for handle in handles:
            segment = self.segments.pop(handle)
            self._on_device.pop(handle, None)
            self._written.discard(handle)
            self.pools[segment.tier].free(segment.run)

    def tier(self, handle: int) -> Tier:
        return self.segments[handle].tier

    def segment_bytes(self, handle: int) -> int:
        """Bytes the segment's slots take (whole blocks)."""
        return self.segments[handle].run.length * self.block_bytes

    # -- arenas -------------------------------------------------------------------------------
    def fits(self, rows: int, width: int) -> bool:
        """Whether an arena of `rows` x `width` tokens fits the device budget at all (with no segment at rest)."""
        return self.budget_bytes is None or self.arena_slots(rows, width) <= self.pools[Tier.DEVICE].allocator.capacity

    def arena_slots(self, rows: int, width: int) -> int:
        return max(1, math.ceil(rows * width / self.block_size))

    def arena(self, rows: int, width: int, keep: Sequence[int] = ()) -> tuple[torch.Tensor, Run]:
        """An arena `[L, 2, B, H, W, D]` from the device pool's end; segments move to the host to make room,
        those in `keep` last. Release it with `release`. Raises KVBudgetTooSmall when it cannot fit."""
        if not self.fits(rows, width):
            raise share_too_small(self.budget_bytes or 0, rows, width, self.arena_slots(rows, width) * self.block_bytes)
        pool, slots = self.pools[Tier.DEVICE], self.arena_slots(rows, width)
        while True:
            try:
                run = pool.allocate(slots, from_end=True)
                break
            except PoolExhausted:
                self._offload_one(keep)
        self._note_peak()
        return self._arena_view(run, rows, width), run

    def _arena_view(self, run: Run, rows: int, width: int) -> torch.Tensor:
        L, two, H, _, D = self.slot_shape
        return self.pools[Tier.DEVICE].flat(run)[: L * two * rows * H * width * D].view(L, two, rows, H, width, D)

    def try_arena(self, rows: int, width: int, reserve: int = 0) -> tuple[torch.Tensor, Run] | None:
        """An arena as `arena` gives, if it fits now beside `reserve` more free slots without moving any
        segment (a prefetch never pushes KV to the host); None otherwise."""
        free, slots = self.free_slots(), self.arena_slots(rows, width)
        if free is not None and free < slots + reserve:
            return None
        try:
            run = self.pools[Tier.DEVICE].allocate(slots, from_end=True)
        except PoolExhausted:
            return None
        self._note_peak()
        return self._arena_view(run, rows, width), run

    def free_slots(self) -> int | None:
        """Device slots free now within the budget (None: no budget)."""
        allocator = self.pools[Tier.DEVICE].allocator
        return None if self.budget_bytes is None else allocator.limit - allocator.used

    def repeat_row(self, arena: torch.Tensor, tokens: int) -> None:
        """Copy row 0's first `tokens` columns into every other row of `arena` `[L, 2, B, H, W, D]`."""
        self.repeat_columns(arena, 0, tokens, 1, arena.shape[2])

    def repeat_columns(self, arena: torch.Tensor, begin: int, end: int, first_row: int, last_row: int) -> None:
        """Copy row 0's columns `begin`..`end` into rows `first_row`..`last_row` of `arena` (one call)."""
        rows = last_row - first_row
        if rows > 0 and end > begin:
            src = arena[:, :, :1, :, begin:end].expand(-1, -1, rows, -1, -1, -1)
            self._copy(arena[:, :, first_row:last_row, :, begin:end], src, "d2d")

    def loading(self) -> contextlib.AbstractContextManager[torch.cuda.Event | None]:
        """Issue the copies inside on the copy stream (engine.kv.streams.on_copy_stream); compute must
        `wait_loaded(event)` on the yielded event before it reads them."""
        return on_copy_stream(self.streams)

    def wait_loaded(self, event: torch.cuda.Event | None) -> None:
        if event is not None:
            self.streams.current_stream().wait_event(event)

    def model_stall(self, h2d_bytes: int, hidden_seconds: float) -> None:
        """The CPU's model of a load: its PCIe time stalls compute, less what ran while earlier compute did."""
        if self.copy_stream is None:
            self.stall_seconds += max(0.0, h2d_bytes / self.bandwidth - hidden_seconds)

    def release(self, run: Run) -> None:
        self.pools[Tier.DEVICE].free(run)

    def _offload_one(self, keep: Sequence[int]) -> None:
        """Move the least recently used device segment (outside `keep` if any is) to the host."""
        candidates = [h for h in self._on_device if h not in keep] or list(self._on_device)
        if not candidates:
            raise PoolExhausted("the verifier's device pool is fragmented with nothing left to move")
        handle = candidates[0]
        old = self.segments[handle]
        new = Segment(Tier.HOST, self.pools[Tier.HOST].allocate(old.run.length), old.tokens)
        self._copy(self._view(new), self._view(old), "d2h")
        self.pools[Tier.DEVICE].free(old.run)
        self.segments[handle] = new
        del self._on_device[handle]
        self._note_written(handle)

    # -- reporting ----------------------------------------------------------------------------
    def memory(self) -> VerifierMemory:
        device = sum(s.run.length for s in self.segments.values() if s.tier is Tier.DEVICE) * self.block_bytes
        host = sum(s.run.length for s in self.segments.values() if s.tier is Tier.HOST) * self.block_bytes
        return VerifierMemory(
            self.budget_bytes or 0,
            device,
            host,
            self.peak_slots * self.block_bytes,
            self.counters.step["h2d"],
            self.counters.step["d2h"],
            self.counters.step["d2d"],
            self.counters.step_calls["h2d"],
            self.counters.step_calls["d2h"],
            self.counters.step_calls["d2d"],
        )

    def start_step(self) -> None:
        """Traffic and the peak count from here (the search settled a step)."""
        self.counters.start_step()
        self.peak_slots = self.pools[Tier.DEVICE].allocator.used

    def wait_copies(self) -> None:
        """Compute waits for every copy issued so far on the copy stream (before it reuses memory they may still
        write); without CUDA copies run when issued."""
        wait_for_copy_stream(self.streams)

    def close(self) -> None:
        """Wait for pending copies (a failed or cancelled run may leave some queued on either stream), then give
        both pools' memory back: memory torch reuses at once must not still be read or written by them."""
        if self.streams is not None:
            self.streams.synchronize()
        for pool in self.pools.values():
            pool.close()
        self.segments.clear()
        self._on_device.clear()
        self._written.clear()

    # -- internals ----------------------------------------------------------------------------
    def _slots(self, tokens: int) -> int:
        return max(1, math.ceil(tokens / self.block_size))

    def _view(self, segment: Segment) -> torch.Tensor:
        return self.pools[segment.tier].segment(segment.run)[:, :, :, : segment.tokens]

    def _copy(self, dst: torch.Tensor, src: torch.Tensor, direction: str) -> None:
        """Copy and count (engine/kv/store.py `counted_copy`). On CUDA the copy is issued on the current stream,
        asynchronous to the host (pinned host memory); a host segment it writes is read again only by `load`,
        which waits for it."""
        counted_copy(self.streams, self.counters, dst, src, direction)

    def _note_written(self, handle: int) -> None:
        """On CUDA, a copy to a host segment is asynchronous (pinned memory): note it until a synchronize."""
        if self.streams is not None and self.segments[handle].tier is Tier.HOST:
            self._written.add(handle)

    def _note_peak(self) -> None:
        self.peak_slots = max(self.peak_slots, self.pools[Tier.DEVICE].allocator.used)
