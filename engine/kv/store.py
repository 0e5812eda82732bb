"""Where every block's KV is (a slot of the device pool or the host pool) and every copy between them.

Blocks live in slots of two `SlotPool`s: the device pool, allocated once and sized to the KV
budget, and the host pool (pinned on CUDA), grown in chunks. Every copy goes through `copy`,
which counts its bytes per direction and per candidate. On CUDA, copies across PCIe are
asynchronous: loads may run on a copy stream (`loading()`), ordered against compute with
CUDA events, write-back does not block compute, and copy time is read from the events. The
streams, events and pinned memory come from one object (engine/kv/streams.py), which tests
replace with a CPU fake that checks the ordering. Without CUDA the *emulated device* is a
budgeted CPU pool: the copies are real, the bytes exact, and PCIe time is modelled from the bytes.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from engine.kv import pieces
from engine.kv.blocks import AppendPlan, BlockManager, Tier
from engine.kv.pool import PoolExhausted, Run, SlotPool
from engine.kv.streams import CudaStreams, on_copy_stream, streams_for, wait_for_copy_stream

DIRECTIONS = ("h2d", "d2h", "d2d", "h2h")
HOST_CHUNK_BYTES = 256 << 20  # the host pool grows by this much at a time


@dataclass
class Counters:
    """Bytes and copy calls per direction, cumulative and for the current step, and bytes per candidate
    for the step. A call is one copy operation (one `copy_` or gather): many small calls cost more
    than one large one of the same bytes, most of all across PCIe."""

    total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))
    step: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))
    step_calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))
    step_copy_seconds: float = 0.0
    step_stall_seconds: float = 0.0  # CUDA: compute waiting for loads, between CUDA events
    _owned: dict[tuple[str, tuple[int, ...]], int] = field(default_factory=lambda: defaultdict(int))

    def add(self, direction: str, nbytes: int, owners: Sequence[int] = (), calls: int = 1) -> None:
        self.total[direction] += nbytes
        self.step[direction] += nbytes
        self.calls[direction] += calls
        self.step_calls[direction] += calls
        if owners:
            self._owned[(direction, tuple(owners))] += nbytes

    def per_candidate(self) -> dict[int, dict[str, int]]:
        """This step's bytes per candidate: bytes moved for several candidates are split evenly,
        the first owners taking the remainder, so the parts sum exactly to the step's totals."""
        result: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(DIRECTIONS, 0))
        for (direction, owners), nbytes in self._owned.items():
            share, extra = divmod(nbytes, len(owners))
            for i, owner in enumerate(owners):
                result[owner][direction] += share + (1 if i < extra else 0)
        return result

    def start_step(self) -> None:
        self.step = dict.fromkeys(DIRECTIONS, 0)
        self.step_calls = dict.fromkeys(DIRECTIONS, 0)
        self._owned.clear()
        self.step_copy_seconds = 0.0
        self.step_stall_seconds = 0.0


@dataclass(frozen=True)
class Slot:
    run: Run
    index: int  # the block's position within its run


class KVStore:
    """Holds every block in a slot of the device or host pool; performs and counts every copy."""

    def __init__(
        self,
        blocks: BlockManager,
        *,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        budget_bytes: int,
        pcie_gbps: float = 25.0,
        host_device: torch.device | str = "cpu",
        host_layout: str = "token",
    ) -> None:
        self.blocks = blocks
        self.slot_shape = (num_layers, 2, num_kv_heads, blocks.block_size, head_dim)
        self.dtype, self.device = dtype, torch.device(device)
        self.pcie_gbps = pcie_gbps
        self.streams = streams_for(self.device)  # None: no CUDA
        self.emulated = self.streams is None
        self.host = torch.device(host_device)  # "meta" for plan-only runs that move no data
        self.pin = not self.emulated and self.host.type == "cpu"
        self.token_bytes = 2 * num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()
        self.block_bytes = self.token_bytes * blocks.block_size
        chunk = max(1, HOST_CHUNK_BYTES // self.block_bytes)
        self.pools = {
            Tier.DEVICE: SlotPool(self.slot_shape, dtype, self.device, capacity=budget_bytes // self.block_bytes),
            Tier.HOST: SlotPool(self.slot_shape, dtype, self.host, capacity=0, pin=self.pin, chunk=chunk,
                                empty=lambda n: self.host_empty((n,), dtype), layout=host_layout, fill_pinned=True),
        }
        self._slots: dict[Tier, dict[int, Slot]] = {Tier.DEVICE: {}, Tier.HOST: {}}
        self._run_users: dict[tuple[Tier, int], int] = {}  # live blocks in each run (freed at zero)
        self.counters = Counters()
        self._timed: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []  # copies on CUDA (PCIe and on the device)
        self._stalls: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []  # compute waiting for a load
        self._written: set[int] = set()  # host blocks asynchronous copies write, until `sync` (CUDA)

    def host_empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """Host memory for KV that crosses PCIe: pinned on CUDA, so that copies from and to it are asynchronous."""
        if self.pin:
            return self.streams.empty_host(shape, dtype)
        return torch.empty(shape, dtype=dtype, device=self.host)

    def release_host_cache(self) -> None:
        """On CUDA, give the system the pinned blocks torch's allocator keeps after they were freed (a policy
        that drops host buffers no later request of the run can reuse)."""
        if self.streams is not None:
            self.streams.release_host_cache()

    # -- slots --------------------------------------------------------------------------------
    def place(self, block_ids: Sequence[int], tier: Tier) -> Run:
        """Give `block_ids` consecutive slots of one run in `tier` (their tokens become contiguous there)."""
        run = self.pools[tier].allocate(len(block_ids))
        self._run_users[(tier, run.start)] = len(block_ids)
        for index, block_id in enumerate(block_ids):
            self._slots[tier][block_id] = Slot(run, index)
            self.blocks.set_placement(block_id, **{_flag(tier): True})
        return run

    def evict(self, block_ids: Sequence[int], tier: Tier) -> None:
        """Drop the copies of `block_ids` in `tier` (the blocks stay where else they are)."""
        for block_id in block_ids:
            slot = self._slots[tier].pop(block_id, None)
            if slot is None:
                continue
            if block_id in self.blocks.blocks:
                self.blocks.set_placement(block_id, **{_flag(tier): False})
            key = (tier, slot.run.start)
            self._run_users[key] -= 1
            if self._run_users[key] == 0:
                del self._run_users[key]
                self.pools[tier].free(slot.run)

    def free(self, block_ids: Sequence[int]) -> None:
        """Release the slots of blocks the manager has freed."""
        for tier in Tier:
            self.evict(block_ids, tier)

    def close(self) -> None:
        """Wait for pending copies, then give both pools' memory back (the run is over)."""
        self.sync()
        for pool in self.pools.values():
            pool.close()
        self._slots = {Tier.DEVICE: {}, Tier.HOST: {}}
        self._run_users.clear()

    def holds(self, block_id: int, tier: Tier) -> bool:
        return block_id in self._slots[tier]

    def tier_of(self, block_id: int) -> Tier:
        return Tier.DEVICE if self.holds(block_id, Tier.DEVICE) else Tier.HOST

    def view(self, block_id: int, tier: Tier, tokens: int | None = None) -> torch.Tensor:
        """The block's KV in `tier`: `[L, 2, H, tokens, D]` (a view of its slot)."""
        slot = self._slots[tier][block_id]
        size = self.blocks.block_size
        start = slot.index * size
        return self.pools[tier].segment(slot.run)[:, :, :, start : start + (size if tokens is None else tokens)]

    def follows(self, block_id: int, previous: int, tier: Tier) -> bool:
        """Whether `block_id` sits in the slot right after `previous`'s, in the same run of `tier`
        (their tokens are then contiguous there, and `span` reads both at once)."""
        slots = self._slots[tier]
        before, slot = slots.get(previous), slots.get(block_id)
        return before is not None and slot == Slot(before.run, before.index + 1)

    def span(self, block_id: int, tier: Tier, tokens: int) -> torch.Tensor:
        """`[L, 2, H, tokens, D]` from the start of `block_id`'s slot on, across the slots after it in its
        run (a view; the caller checks with `follows` that the blocks it names are there)."""
        slot = self._slots[tier][block_id]
        start = slot.index * self.blocks.block_size
        return self.pools[tier].segment(slot.run)[:, :, :, start : start + tokens]

    def contiguous(self, block_ids: Sequence[int], tier: Tier, *, whole_run: bool = False) -> torch.Tensor | None:
        """`[L, 2, H, T, D]` over `block_ids` read in place, if they are consecutive slots of one run; with
        `whole_run`, the run's whole segment, if they are its first slots (a head-major run read whole is one
        piece per layer and head group: engine/kv/pieces.py)."""
        if not block_ids or not all(self.holds(b, tier) for b in block_ids):
            return None
        first = self._slots[tier][block_ids[0]]
        for offset, block_id in enumerate(block_ids):
            if self._slots[tier][block_id] != Slot(first.run, first.index + offset):
                return None
        segment = self.pools[tier].segment(first.run)
        if whole_run:
            return segment if first.index == 0 else None
        size = self.blocks.block_size
        return segment[:, :, :, first.index * size : first.index * size + self.blocks.num_tokens(block_ids)]

    def resident_bytes(self, tier: Tier) -> int:
        return len(self._slots[tier]) * self.block_bytes

    def working(self, shapes: Sequence[tuple[int, ...]], *, from_end: bool = True) -> tuple[list[torch.Tensor], Run]:
        """Tensors of `shapes` carved from one device run taken from the pool's end (or its start, for a
        caller that keeps its runs at the low end); free it with `release`."""
        sizes = [math.prod(shape) for shape in shapes]
        pool = self.pools[Tier.DEVICE]
        run = pool.allocate(max(1, -(-sum(sizes) // pool.slot_elements)), from_end=from_end)
        flat, tensors, offset = pool.flat(run), [], 0
        for shape, size in zip(shapes, sizes, strict=True):
            tensors.append(flat[offset : offset + size].view(shape))
            offset += size
        return tensors, run

    def release(self, run: Run) -> None:
        self.pools[Tier.DEVICE].free(run)

    # -- budget -------------------------------------------------------------------------------
    @property
    def device_capacity_bytes(self) -> int:
        return self.pools[Tier.DEVICE].capacity_bytes

    def limit_device(self, budget_bytes: int) -> int:
        """Use at most `budget_bytes` of the device pool from now on (never more than it holds)."""
        allocator = self.pools[Tier.DEVICE].allocator
        allocator.limit = max(allocator.used, min(allocator.capacity, budget_bytes // self.block_bytes))
        return allocator.limit * self.block_bytes

    def start_peak(self) -> None:
        allocator = self.pools[Tier.DEVICE].allocator
        allocator.peak = allocator.used

    @property
    def peak_device_bytes(self) -> int:
        return self.pools[Tier.DEVICE].allocator.peak * self.block_bytes

    # -- copies -------------------------------------------------------------------------------
    def copy(self, dst: torch.Tensor, src: torch.Tensor, direction: str, owners: Sequence[int] = ()) -> None:
        """Copy and count. On CUDA, copies across PCIe are asynchronous (pinned memory, stream
        order) and, like copies on the device, timed by CUDA events on the stream that runs them (a
        host timer would see only the launch); the host reads a host block only after `sync`, which
        the KV cache calls at the end of every step (a block written back in a step is read in it only by
        a speculative fork's copy-on-write, and `write` syncs first)."""
        counted_copy(self.streams, self.counters, dst, src, direction, owners, self._timing(direction))

    @contextlib.contextmanager
    def _timing(self, direction: str) -> Iterator[None]:
        """Times the copy inside: on the host where it runs there (the emulated device, host to host), else
        between CUDA events on its stream, read at `sync`."""
        if self.emulated or direction == "h2h":
            start = time.perf_counter()
            yield
            self.counters.step_copy_seconds += time.perf_counter() - start
            return
        begin, end = self.streams.event(timing=True), self.streams.event(timing=True)
        begin.record()
        yield
        end.record()
        self._timed.append((begin, end))

    def loading(self) -> contextlib.AbstractContextManager[torch.cuda.Event | None]:
        """Issue the copies inside on the copy stream (engine.kv.streams.on_copy_stream); compute must
        `wait_loaded(event)` on the yielded event before it reads what was loaded."""
        return on_copy_stream(self.streams)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Issue a write-back's copies on the copy stream, after the compute that made the KV, so compute
        goes on to the next group meanwhile. Nothing reads the written blocks or reuses the group's freed
        runs before waiting for the copy stream: a later load's copies queue behind these on that stream,
        compute waits for a load's event before it reads (`wait_loaded`), and the step ends with `sync`."""
        with self.loading():
            yield

    def wait_copies(self) -> None:
        """Compute waits for every copy issued so far on the copy stream (a write-back still reading a freed run,
        a prefetch reading the arena's loaded columns) before it writes device memory those copies may read.
        Without CUDA copies run when issued: nothing to wait for."""
        wait_for_copy_stream(self.streams)

    def wait_loaded(self, event: torch.cuda.Event | None) -> None:
        """Make compute wait for a load; the time compute stood still is measured between two CUDA events."""
        if event is None:
            return
        stream = self.streams.current_stream()
        begin, end = self.streams.event(timing=True), self.streams.event(timing=True)
        begin.record(stream)
        stream.wait_event(event)
        end.record(stream)
        self._stalls.append((begin, end))

    @staticmethod
    def direction(src: Tier, dst: Tier) -> str:
        return {
            (Tier.HOST, Tier.DEVICE): "h2d",
            (Tier.DEVICE, Tier.HOST): "d2h",
            (Tier.DEVICE, Tier.DEVICE): "d2d",
            (Tier.HOST, Tier.HOST): "h2h",
        }[(src, dst)]

    def write(self, plan: AppendPlan, new_kv: torch.Tensor, home: Tier, owner: int, source: Tier = Tier.DEVICE) -> None:
        """Apply an append plan in `home`: copy-on-write, then the new tokens `[L, 2, H, n, D]` (in `source`).

        The plan's new blocks take consecutive slots of one run when the pool has one free (else a
        slot each), so a later load reads them in one copy."""
        fresh = [b for b in plan.new_blocks if not self.holds(b, home)]
        try:
            if fresh:
                self.place(fresh, home)
        except PoolExhausted:  # no run that long: the device pool is fragmented
            for block_id in fresh:
                self.place([block_id], home)
        for cow in plan.copies:
            src_tier = self.tier_of(cow.source)
            direction = self.direction(src_tier, home)
            if direction == "h2h" and cow.source in self._written:
                self.sync()  # the host copies it now: wait for its asynchronous write (a fork of a row just written)
            self.copy(self.view(cow.target, home, cow.tokens), self.view(cow.source, src_tier, cow.tokens), direction,
                      [owner])  # fmt: skip
            self._note_written(cow.target, home, direction)
        direction = self.direction(source, home)
        for w in plan.writes:
            dst = self.view(w.block, home)[:, :, :, w.offset : w.offset + w.count]
            self.copy(dst, new_kv[:, :, :, w.start : w.start + w.count], direction, [owner])
            self._note_written(w.block, home, direction)

    def _note_written(self, block_id: int, tier: Tier, direction: str) -> None:
        """Remember a host block that an asynchronous copy (CUDA) writes, until `sync`."""
        if tier is Tier.HOST and direction != "h2h" and not self.emulated:
            self._written.add(block_id)

    @property
    def bandwidth(self) -> float:
        """Modelled PCIe bytes per second."""
        return self.pcie_gbps * 1e9

    def sync(self) -> None:
        """Wait for every copy; add the measured copy time of asynchronous copies (CUDA events)."""
        if self.emulated:
            return
        self.streams.synchronize()
        self.counters.step_copy_seconds += sum(b.elapsed_time(e) for b, e in self._timed) / 1000
        self.counters.step_stall_seconds += sum(b.elapsed_time(e) for b, e in self._stalls) / 1000
        self._timed.clear()
        self._stalls.clear()
        self._written.clear()


def counted_copy(
    streams: CudaStreams | None, counters: Counters, dst: torch.Tensor, src: torch.Tensor, direction: str,
    owners: Sequence[int] = (), timed: contextlib.AbstractContextManager | None = None,
) -> None:
    """Copy `src` into `dst` and count it in `counters` (bytes and calls, for the KV store and the verifier's
    pools alike). Without CUDA (`streams` None) the copy runs at once; on CUDA a host-to-host copy runs on the
    host, any other is issued on the current stream, a strided host side sent as its contiguous pieces
    (engine/kv/pieces.py, one call each). `timed` wraps the copy alone."""
    split = pieces.split_copy(dst, src, direction)
    with timed or contextlib.nullcontext():
        if streams is None:
            dst.copy_(src)
        elif direction == "h2h":
            streams.host_copy(dst, src)
        else:
            pieces.copy(streams, dst, src, direction, split)
    counters.add(direction, src.numel() * src.element_size(), owners, 1 if split is None else split.pieces)


def _flag(tier: Tier) -> str:
    return "on_device" if tier is Tier.DEVICE else "on_host"
