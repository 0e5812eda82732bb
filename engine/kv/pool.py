"""Slot pools: one device pool allocated once and sized to the budget, one host pool grown in chunks.

A *slot* holds one block: `[L, 2, H, block_size, D]`. A *run* is `n` consecutive slots, and
its memory reads as one segment `[L, 2, H, n * block_size, D]`, so the tokens of consecutive
blocks of a run are contiguous per layer and head: a shared prefix kept in one run is read in
place by every candidate's attention, and a group's working KV is a run too. Nothing here
allocates per step; a run is a view of the pool's one tensor. A host pool lays a run out the way
its policy copies it across PCIe, and its segment is a strided view with the same shape, so that
what crosses is a few contiguous pieces of pinned memory, each one asynchronous copy
(engine/kv/pieces.py): *token-major* (`[T, L, 2, H, D]`: any range of tokens is one piece; lbs and
the others) or *head-major* (`[L, H, T, 2, D]`: one layer's head group of a run is one piece per
head, or one in all when the run is read whole; head-wise).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from engine.kv.streams import filling_pinned_block

LAYOUTS = {  # a run's memory order -> what it serves
    "layer": "[L, 2, H, T, D]: the device pool (attention reads a layer's K or V of a run in place)",
    "token": "[T, L, 2, H, D]: a host pool whose copies take ranges of tokens (lbs, layer-wise, in_device)",
    "head": "[L, H, T, 2, D]: a host pool whose copies take one layer's head group (head-wise)",
}


class PoolExhausted(RuntimeError):
    """No run of the requested length is free (the planner keeps within the budget, so this is a bug or a shrink)."""


@dataclass(frozen=True)
class Run:
    start: int  # first slot
    length: int  # slots


class RunAllocator:
    """First-fit allocation of runs of consecutive slots out of `capacity`, with coalescing on free."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.limit = capacity  # slots that may be in use at once (the budget re-read can lower it)
        self._free: list[Run] = [Run(0, capacity)] if capacity else []  # sorted by start
        self._boundaries: set[int] = set()  # slots where a chunk starts: runs never cross them
        self.used = 0
        self.peak = 0

    def allocate(self, length: int, *, from_end: bool = False) -> Run:
        """First fit from the start, or last fit from the end (transient runs, so they do not
        fragment the low slots that long-lived blocks fill)."""
        if length < 1:
            raise ValueError(f"a run is at least one slot (asked {length}).")
        if self.used + length > self.limit:
            raise PoolExhausted(f"{length} slots asked, {self.limit - self.used} of {self.limit} free")
        holes = range(len(self._free) - 1, -1, -1) if from_end else range(len(self._free))
        for index in holes:
            hole = self._free[index]
            if hole.length < length:
                continue
            if from_end:
                run, rest = Run(hole.start + hole.length - length, length), Run(hole.start, hole.length - length)
            else:
                run, rest = Run(hole.start, length), Run(hole.start + length, hole.length - length)
            self._free[index : index + 1] = [rest] if rest.length else []
            self.used += length
            self.peak = max(self.peak, self.used)
            return run
        raise PoolExhausted(f"no {length} consecutive free slots ({self.capacity - self.used} free, fragmented)")

    def extend(self, slots: int) -> None:
        """Add `slots` free slots after the current capacity (a host pool's new chunk, never merged across)."""
        base, self.capacity = self.capacity, self.capacity + slots
        self.limit += slots
        self._boundaries.add(base)
        self._free.append(Run(base, slots))

    def free(self, run: Run) -> None:
        index = next((i for i, hole in enumerate(self._free) if hole.start > run.start), len(self._free))
        before = self._free[index - 1] if index else None
        after = self._free[index] if index < len(self._free) else None
        if (before and before.start + before.length > run.start) or (after and run.start + run.length > after.start):
            raise RuntimeError(f"slots {run} freed twice")
        self.used -= run.length
        if after and run.start + run.length == after.start and after.start not in self._boundaries:
            run = Run(run.start, run.length + after.length)
            del self._free[index]
        if before and before.start + before.length == run.start and run.start not in self._boundaries:
            self._free[index - 1] = Run(before.start, before.length + run.length)
        else:
            self._free.insert(index, run)


class SlotPool:
    """Runs of slots carved from flat tensors: one tensor (device) or chunks added as needed (host)."""

    def __init__(
        self,
        slot_shape: tuple[int, int, int, int, int],
        dtype: torch.dtype,
        device: torch.device,
        *,
        capacity: int,
        pin: bool = False,
        chunk: int | None = None,
        empty: Callable[[int], torch.Tensor] | None = None,
        layout: str = "layer",
        fill_pinned: bool = False,
    ) -> None:
        """`empty(n)`: a flat tensor of `n` elements for a chunk (default `torch.empty`, pinned with `pin`);
        `layout`: how a run's memory is ordered, one of LAYOUTS; `fill_pinned`: a chunk made for a run longer
        than `chunk` takes all the slots of the block torch's caching host allocator pins for it (the next
        power of two of its bytes: what it would lock in RAM anyway), so later blocks can use the rest."""
        if layout not in LAYOUTS:
            raise ValueError(f"unknown pool layout {layout!r}; one of {', '.join(LAYOUTS)}")
        self.slot_shape = slot_shape  # (L, 2, H, block_size, D)
        self.dtype, self.device, self.pin, self.empty = dtype, device, pin, empty
        self.slot_elements = 1
        for n in slot_shape:
            self.slot_elements *= n
        self.layout, self.fill_pinned = layout, fill_pinned
        self.chunk = chunk  # None: one tensor of `capacity` slots, allocated now
        self._chunks: list[torch.Tensor] = []
        self._chunk_starts: list[int] = []  # first slot of each chunk
        self.allocator = RunAllocator(0)
        if chunk is None:
            self._add_chunk(capacity)

    def _tensor(self, slots: int) -> torch.Tensor:
        if self.empty is not None:
            return self.empty(slots * self.slot_elements)
        return torch.empty(slots * self.slot_elements, dtype=self.dtype, device=self.device, pin_memory=self.pin)

    def allocate(self, length: int, *, from_end: bool = False) -> Run:
        """A run of `length` slots; a growing pool adds a chunk (a run never spans two chunks)."""
        try:
            return self.allocator.allocate(length, from_end=from_end)
        except PoolExhausted:
            if self.chunk is None:
                raise
        slots = max(self.chunk, length)
        if self.fill_pinned:
            slots = filling_pinned_block(slots, self.slot_elements * self.element_size)
        self._add_chunk(slots)
        return self.allocator.allocate(length, from_end=from_end)

    def _add_chunk(self, slots: int) -> None:
        self._chunks.append(self._tensor(slots))
        self._chunk_starts.append(self.allocator.capacity)
        self.allocator.extend(slots)

    def free(self, run: Run) -> None:
        self.allocator.free(run)

    def close(self) -> None:
        """Give the pool's memory back now (the run is over; a view still held elsewhere keeps its chunk)."""
        self._chunks.clear()
        self._chunk_starts.clear()
        self.allocator = RunAllocator(0)

    def flat(self, run: Run) -> torch.Tensor:
        """The run's memory as one flat tensor (a view)."""
        starts = self._chunk_starts
        chunk = max(i for i, s in enumerate(starts) if s <= run.start)
        offset = (run.start - starts[chunk]) * self.slot_elements
        return self._chunks[chunk][offset : offset + run.length * self.slot_elements]

    def segment(self, run: Run) -> torch.Tensor:
        """The run's memory as `[L, 2, H, run.length * block_size, D]` (a view, no copy; strided but for the
        layer-major layout)."""
        L, two, H, block, D = self.slot_shape
        T = run.length * block
        if self.layout == "token":
            return self.flat(run).view(T, L, two, H, D).permute(1, 2, 3, 0, 4)
        if self.layout == "head":
            return self.flat(run).view(L, H, T, two, D).permute(0, 3, 1, 2, 4)
        return self.flat(run).view(L, two, H, T, D)

    @property
    def capacity_bytes(self) -> int:
        return self.allocator.capacity * self.slot_elements * self.element_size

    @property
    def element_size(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()
