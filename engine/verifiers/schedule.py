"""The verifier's step group by group, scheduled like the generator's LBS (engine/kv/lbs.py, groups.py).

A *group* is a batch of siblings: candidates with the same parent path, whose new steps run together
over the parent's chain of KV segments (the question and the accepted steps), loaded into row 0 of an
arena `[L, 2, B, H, W, D]` and repeated into the other rows. Consecutive groups share part of that
chain (the question at least; all of it when one parent's children fill several batches), so:

- the groups run in prefix order: after each group, the one whose chain shares the most tokens with
  it (ties: the earlier), else in the order the paths were given;
- the next group's arena is taken and filled while this one computes (on the copy stream on CUDA):
  the chain it shares with this group is copied from this group's arena, on the device, so a shared
  segment stays on the device across the boundary (a host segment crosses PCIe once, not once per
  group) and only the rest is loaded from its segments. This prefetch takes free device slots only,
  leaving room for this group's new segments, so it never pushes KV to the host; when there is no
  room before the compute, the hand-off is tried again after it (the bytes are saved, nothing overlaps);
- a group loaded the plain way makes room by moving the least recently used segments to the host,
  those of its own chain last (also protecting the next group's chain was tried: the segments moved
  instead were needed again sooner, and the H2D bytes grew).

On the CPU the copies run at once and a load's PCIe time is modelled from its bytes (a prefetched
load hides behind the previous group's compute), as the generator's emulated device does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from engine.kv.pool import Run
from engine.verifiers.kv_pools import VerifierKV


@dataclass(frozen=True)
class KVNode:
    """One segment of a path's KV (a handle in the verifier's pools) and the path's length through it."""

    parent: KVNode | None
    handle: int
    length: int
    pending: torch.Tensor | None = None  # [1, T, H] entropy exit: the last run layer's output, later layers missing
    layers_run: int = 0  # with `pending`: the layers whose KV the segment holds

    def chain(self) -> list[KVNode]:
        """The nodes from the root down to this one."""
        nodes, node = [], self
        while node is not None:
            nodes.append(node)
            node = node.parent
        return nodes[::-1]


@dataclass(frozen=True)
class VerifyGroup:
    """Siblings verified together: the items' indices, each row's new tokens and how many of them it keeps."""

    parent: KVNode | None
    rows: tuple[int, ...]
    sequences: tuple[tuple[int, ...], ...]  # each row's step body and the probe, or its body and a look-ahead's
    keep: tuple[int, ...]  # each row's body length: its new segment
    ahead: tuple[int, ...] = ()  # each row's look-ahead body length (0: none), a second new segment (look_ahead.py)

    @property
    def chain(self) -> list[KVNode]:
        return self.parent.chain() if self.parent is not None else []

    @property
    def start(self) -> int:
        """Columns the parent's chain takes in the arena (the path's length through the parent)."""
        return self.parent.length if self.parent is not None else 0

    @property
    def width(self) -> int:
        return self.start + max(len(s) for s in self.sequences)

    def new_slots(self, block_size: int) -> int:
        """Device slots the group's new segments take (whole blocks per segment)."""
        return sum(max(1, math.ceil(k / block_size)) for k in self.keep) + sum(
            math.ceil(a / block_size) for a in self.ahead)


@dataclass
class LoadedArena:
    """An arena run and what its rows hold: row `r`'s leading columns are the KV of `row_chains[r]`."""

    arena: torch.Tensor  # [L, 2, B, H, W, D]: the run's whole shape (the largest group it is kept for)
    run: Run
    row_chains: list[list[KVNode]]
    group: VerifyGroup | None = None  # the group loaded in it now
    loaded: object = None  # CUDA event after the loads (None on the CPU)
    h2d_bytes: int = 0  # what loading the group moved over PCIe
    early: bool = False  # loaded before the previous group computed (its PCIe time hides behind that compute)

    def holds(self, group: VerifyGroup) -> bool:
        """Whether `group` fits in this arena in place (its rows and columns within the arena's)."""
        return len(group.rows) <= self.arena.shape[2] and group.width <= self.arena.shape[4]

    def view(self) -> torch.Tensor:
        """The loaded group's part: `[L, 2, B, H, W, D]` with its own rows and columns."""
        return self.arena[:, :, : len(self.group.rows), :, : self.group.width]


def shared_nodes(a: Sequence[KVNode], b: Sequence[KVNode]) -> int:
    """How many leading nodes (segments) two chains have in common."""
    n = 0
    while n < min(len(a), len(b)) and a[n].handle == b[n].handle:
        n += 1
    return n


def shared_tokens(a: Sequence[KVNode], b: Sequence[KVNode]) -> int:
    n = shared_nodes(a, b)
    return a[n - 1].length if n else 0


def prefix_order(groups: Sequence[VerifyGroup]) -> list[VerifyGroup]:
    """FlashTTS's prefix-aware order: after each group, the one sharing the most chain tokens (ties: earlier)."""
    remaining = list(groups)
    ordered = [remaining.pop(0)] if remaining else []
    while remaining:
        last = ordered[-1].chain
        shared = [shared_tokens(last, g.chain) for g in remaining]
        ordered.append(remaining.pop(shared.index(max(shared))))
    return ordered


class GroupScheduler:
    """Loads, runs and releases a step's groups in order: in place in the arena kept from the group before
    when it fits there, else prefetched beside it, else loaded the plain way."""

    def __init__(self, kv: VerifierKV, *, prefetch: bool = True) -> None:
        self.kv, self.prefetch = kv, prefetch

    def run(self, groups: Sequence[VerifyGroup], compute: Callable[[VerifyGroup, torch.Tensor], None]) -> None:
        """`compute(group, arena)` runs a loaded group and keeps its new segments; every arena is released."""
        held: LoadedArena | None = None
        ahead: LoadedArena | None = None
        previous = 0.0  # seconds the previous group computed
        try:
            for index, group in enumerate(groups):
                after = groups[index + 1] if index + 1 < len(groups) else None
                if held is not None and self._in_place(held, group):
                    self._fill(held, group, None, early=False)  # in place: the shared chain stays where it is
                elif ahead is not None:
                    self._release(held, ahead)
                    held, ahead = ahead, None
                else:
                    self._release(held, None)
                    held = None
                    held = self._load(groups, index)
                if after is not None and self.prefetch and not held.holds(after):
                    ahead = self._hand_off(held, after, reserve=group.new_slots(self.kv.block_size), early=True)
                self.kv.wait_loaded(held.loaded)
                self.kv.model_stall(held.h2d_bytes, previous if held.early else 0.0)
                began = time.perf_counter()
                compute(group, held.view())
                previous = time.perf_counter() - began
                if after is not None and self.prefetch and ahead is None and not held.holds(after):
                    ahead = self._hand_off(held, after, reserve=0, early=False)
        finally:
            self._release(held, ahead)
            self._release(ahead, None)

    def _in_place(self, held: LoadedArena, group: VerifyGroup) -> bool:
        """Whether `group` runs in `held` (kept from the group before): it fits there, and the arena's slots
        beyond what the group's own would take do not crowd out the group's new segments."""
        if not held.holds(group):
            return False
        free = self.kv.free_slots()
        own = self.kv.arena_slots(len(group.rows), group.width)
        return free is None or held.run.length <= own or free >= group.new_slots(self.kv.block_size)

    def _release(self, batch: LoadedArena | None, reader: LoadedArena | None) -> None:
        if batch is not None:
            if reader is not None:
                self.kv.wait_loaded(reader.loaded)  # a hand-off read this arena: done before it is reused
            self.kv.release(batch.run)

    def _load(self, groups: Sequence[VerifyGroup], index: int) -> LoadedArena:
        """An arena for `groups[index]`, wide enough for the groups after it while that takes only slots free
        now (beside its new segments); the least recently used segments outside its chain move out first."""
        group = groups[index]
        rows, width = len(group.rows), group.width
        free = self.kv.free_slots()
        own = self.kv.arena_slots(rows, width)
        room = None if free is None else max(own, free - group.new_slots(self.kv.block_size))
        for later in groups[index + 1 :]:
            wider = max(rows, len(later.rows)), max(width, later.width)
            if not self.kv.fits(*wider) or (room is not None and self.kv.arena_slots(*wider) > room):
                break
            rows, width = wider
        arena, run = self.kv.arena(rows, width, keep=[n.handle for n in group.chain])
        return self._fresh(LoadedArena(arena, run, [[] for _ in range(rows)]), group, None, early=False)

    def _hand_off(self, source: LoadedArena, group: VerifyGroup, *, reserve: int, early: bool) -> LoadedArena | None:
        """`group` loaded beside `source` if free slots allow (`reserve` kept free), the chain they share
        copied from `source`'s arena; None when it does not fit."""
        taken = self.kv.try_arena(len(group.rows), group.width, reserve)
        if taken is None:
            return None
        return self._fresh(LoadedArena(*taken, [[] for _ in range(len(group.rows))]), group, source, early)

    def _fresh(self, batch: LoadedArena, group: VerifyGroup, source: LoadedArena | None, early: bool) -> LoadedArena:
        try:
            self._fill(batch, group, source, early)
        except BaseException:
            self.kv.wait_copies()  # loads queued into the run may still write it: they land before it is reused
            self.kv.release(batch.run)
            raise
        return batch

    def _fill(self, batch: LoadedArena, group: VerifyGroup, source: LoadedArena | None, early: bool) -> None:
        """Row 0 gets the chain past what it holds already: what `source`'s row 0 shares in one device copy,
        the rest segment by segment; every other row then copies from row 0 the columns it lacks."""
        chain, arena, before = group.chain, batch.arena, self.kv.counters.step["h2d"]
        start, rows = group.start, len(group.rows)
        try:
            with self.kv.loading() as loaded:
                done = shared_nodes(batch.row_chains[0], chain)
                offset = chain[done - 1].length if done else 0
                if source is not None and shared_nodes(source.row_chains[0], chain) > done:
                    done = shared_nodes(source.row_chains[0], chain)
                    end = chain[done - 1].length
                    self.kv.copy_columns(arena[:, :, 0, :, offset:end], source.arena[:, :, 0, :, offset:end])
                    offset = end
                for node in chain[:done]:
                    self.kv.touch(node.handle)
                for node in chain[done:]:
                    self.kv.load(node.handle, arena[:, :, 0, :, offset : node.length])
                    offset = node.length
                first = 1
                while first < rows:  # rows that hold the same share of the chain take one copy together
                    have = shared_tokens(batch.row_chains[first], chain)
                    last = first + 1
                    while last < rows and shared_tokens(batch.row_chains[last], chain) == have:
                        last += 1
                    self.kv.repeat_columns(arena, have, start, first, last)
                    first = last
        except BaseException:
            batch.row_chains = [[] for _ in batch.row_chains]  # half loaded: nothing in it can be trusted
            raise
        batch.row_chains[:rows] = [chain] * rows
        batch.group, batch.loaded, batch.early = group, loaded, early
        batch.h2d_bytes = self.kv.counters.step["h2d"] - before
