"""Runs a step group by group (in_device, lbs): load a group's KV, decode it, write the new KV back.

A loaded group (engine/kv/loaded_group.py) is a shared prefix, with cascade attention a parent
level, and an arena, all runs of the one device pool.

Timing model for the emulated device: a group's copies to the device stall compute unless
they were prefetched while the previous group computed; write-back is not counted as a stall.
On CUDA the next group is loaded on the copy stream while this one computes, when the pool
has room for both; when it has not (balanced groups each take most of the budget), what fits of
the next group's blocks is copied ahead into the room left (engine/kv/staging.py) and its load
takes them from there on the device. A group's new KV is written back on the copy stream while
the next one computes (engine/kv/store.py `writing`).

With prefix-aware order the next group also takes on what this one placed on the device
(`LoadedGroup.placed`, the *carry*): a block both need is copied d2d from this group's parent
level or arena instead of crossing PCIe again. That needs this group's runs alive while the next
one loads: on CUDA the prefetch does it; else (the emulated device, or no room during compute)
the next group is loaded right after this one's write-back and before its unload, when the pool
has room for both (`_load_beside`); without room it loads after the unload, with no carry.

Why a carried copy is safe on CUDA: loads run on the copy stream (`KVStore.loading`, which first
waits for compute), and so do write-backs (`KVStore.writing`). A prefetch's d2d copies read this
group's parent level and the arena's columns before `W`, which hold loaded blocks; decode writes
only the arena's new columns (`W .. W + k`), so the reads may overlap compute. A lent row is the
exception (engine/kv/lending.py): its copy overwrites its loaded columns, so compute first waits for
the copy stream, and the row's blocks leave the carry for any group loaded later. When this group's
runs are released, a later load that reuses them writes there on the copy stream, after the
carried reads in stream order. What a carried column holds stays right: blocks are freed only
between steps, and a block that the next group's tables hold too has a refcount above one, so the
write-back copies it on write instead of appending to it in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import torch

from engine.kv.arena import BlockCopier, Placed, block_users
from engine.kv.attention import SharedPrefix, arena_cache, uses_cascade
from engine.kv.blocks import BlockManager, Tier
from engine.kv.kept_prefix import PrefixKeeper
from engine.kv.lending import Lending, columns
from engine.kv.loaded_group import LoadedGroup, layout_of, load_parents, load_rows
from engine.kv.policy import (
    OUT_OF_MEMORY,
    Ahead,
    Decode,
    Group,
    GroupDone,
    Live,
    StepTiming,
    common_prefix,
    group_done,
    split_for_retry,
    work_of,
)
from engine.kv.staging import CopyAhead, Staged, blocks_ahead, stage_ahead, stage_room
from engine.kv.store import KVStore
from engine.kv.working import group_shape
from engine.rows import Row, RowResult


class GroupExecutor:
    """Decodes groups of candidates whose KV is loaded from blocks in the store."""

    def __init__(
        self, config, blocks: BlockManager, store: KVStore, home: Tier, decode: Decode, step_tokens: int, share: bool,
        lend: bool = False,
    ) -> None:
        self.config, self.blocks, self.store, self.home = config, blocks, store, home
        self.decode, self.step_tokens, self.share = decode, step_tokens, share
        self.cascade = share and uses_cascade(config)  # else rows hold all
        self.lend = lend  # rows may decode other candidates' children once theirs are over (engine/kv/lending.py)
        self.prefixes = PrefixKeeper(store, blocks)  # each group's shared prefix; `.keep`: prefix-aware order
        self._moved_ahead = 0  # H2D bytes of a load beside the group before that did not fit (the next load's)
        self._staged: Staged | None = None  # the next group's blocks copied ahead into the room left (CUDA)
        self._modelled: tuple[Group, CopyAhead, int] | None = None  # emulated: what copy-ahead would take, PCIe bytes
        self.prefetch = False  # balanced prefetch: copy the next group's blocks into the room this one leaves
        self.overlap = not store.emulated  # loads may run beside compute (CUDA): prefetch and copy-ahead really copy

    def run_step(
        self, groups: Sequence[Group], live: dict[int, Live], timing: StepTiming, should_stop: Callable[[], bool]
    ) -> Iterator[GroupDone]:
        """Yields after each group (a cancellation point); `live` tables are updated in place.

        A group that runs out of device memory (CUDA, or a pool the budget re-read shrank) is
        split in two and retried; only a single candidate that cannot fit is an error. Whatever
        way the step ends, every run it took from the pool is given back.
        """
        self._ahead, self._moved_ahead, self._modelled = None, 0, None
        tables = [[live[c].table for c in g.candidates] for g in groups]
        self.prefixes.capacity = max((self.blocks.num_tokens(common_prefix(t)) for t in tables), default=0)
        try:
            yield from self._run_groups(list(groups), live, timing, should_stop)
        finally:
            self._ahead = self._unload(self._ahead)
            self._drop_staged()
            self.prefixes.drop()

    def _run_groups(self, queue: list[Group], live, timing: StepTiming, should_stop) -> Iterator[GroupDone]:
        previous_compute, index = 0.0, 0
        while queue:
            group, batch = queue.pop(0), None
            try:
                batch = self._take_or_load(group, live)
                self._settle_ahead(batch)
                self._start_next(queue, live, batch)
                self.store.wait_loaded(batch.loaded)
                results, compute = self._decode(batch, should_stop)
            except OUT_OF_MEMORY as error:
                self._unload(batch)
                queue[:0] = self._retry_smaller(group, error, timing)
                continue
            except BaseException:
                self._unload(batch)
                raise
            try:
                with self.store.writing():  # on CUDA: on the copy stream, while the next group computes
                    self._write_back(batch, results)  # never retried: it changes the candidates' tables
                if queue and self._ahead is None and self._carry(batch) is not None and not should_stop():
                    self._ahead = self._load_beside(queue[0], live, batch)
            finally:
                timing.peak_device_bytes = max(timing.peak_device_bytes, self.store.peak_device_bytes)
                self._unload(batch)
            self._account(batch, compute, previous_compute, timing)
            previous_compute = compute
            yield group_done(index, self._as_loaded(group, batch), results, timing)
            index += 1
            if should_stop():
                return

    def _take_or_load(self, group: Group, live: dict[int, Live]) -> LoadedGroup:
        """The group as a prefetch loaded it, else loaded now (taking what copy-ahead staged for it)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.group is group:
            return ahead
        staged = self._staged_carry(group)
        batch = self._load(group, live, staged)
        batch.staged = self._staged.members if staged is not None else ()
        return batch

    def _settle_ahead(self, batch: LoadedGroup) -> None:
        """What was done ahead for `batch` becomes its own: copy-ahead's modelled share (emulated), the staged
        run given back, and the bytes a load beside the group before moved early."""
        self._take_modelled(batch)
        self._drop_staged()  # its copies are issued: stream order keeps them before the run's reuse
        batch.h2d_bytes, self._moved_ahead = batch.h2d_bytes + self._moved_ahead, 0

    def _start_next(self, queue: list[Group], live: dict[int, Live], batch: LoadedGroup) -> None:
        """While `batch` computes, the next group loads beside it (a prefetch), else what fits of its blocks is
        copied ahead into the room `batch` leaves (or, emulated, noted for the timing model)."""
        self._ahead = self._prefetch(queue[0], live, self._carry(batch)) if queue else None
        if queue and self._ahead is None:
            self._staged = self._stage_next(queue[0], live, batch)

    def _retry_smaller(self, group: Group, error: BaseException, timing: StepTiming) -> list[Group]:
        """Out of device memory: what was loaded, staged or kept ahead goes, and the group is split in two to be
        retried (a single candidate that cannot fit is an error: `split_for_retry`)."""
        self._ahead = self._unload(self._ahead)
        self._drop_staged()
        self._modelled = None
        self.prefixes.drop()
        return split_for_retry(group, error, timing)

    def _account(self, batch: LoadedGroup, compute: float, previous_compute: float, timing: StepTiming) -> None:
        """The emulated device's stall: the group's PCIe bytes at the modelled bandwidth, less what copy-ahead
        would have moved while the group before computed (at most that compute)."""
        timing.compute_seconds += compute
        if self.store.emulated:
            copied = batch.h2d_bytes / self.store.bandwidth
            hidden = min(batch.ahead_bytes, batch.h2d_bytes) / self.store.bandwidth
            timing.modelled_stall_seconds += copied - min(hidden, previous_compute)

    def _as_loaded(self, group: Group, batch: LoadedGroup) -> Group:
        """The group as it ran: its members count as prefetched when a prefetch loaded them all (CUDA), else
        those copy-ahead took whole (modelled on the emulated device)."""
        return replace(group, prefetched=group.candidates if batch.early else batch.staged)

    def _carry(self, batch: LoadedGroup) -> Placed | None:
        """What the next group may take on from `batch` (prefix-aware order with sharing only, so every
        other switch moves exactly what it did without the carry)."""
        return batch.placed if self.prefixes.keep and self.share else None

    def _prefetch(self, group: Group, live: dict[int, Live], carry: Placed | None) -> LoadedGroup | None:
        """Load the next group now on the copy stream (CUDA), if the pool has room beside this one."""
        if not self.overlap or self.home is Tier.DEVICE:
            return None
        previous = self.prefixes.kept
        try:
            batch = self._load(group, live, carry, early=True)
        except OUT_OF_MEMORY as error:  # no room now: the group loads after this one (never split for it); the kept
            # prefix stays for that load (it was dropped to stage anew)
            if isinstance(error, torch.OutOfMemoryError):  # runs given back with copies still queued into them
                self.store.wait_copies()
            self.prefixes.restore(previous)
            return None
        batch.early = True
        return batch

    def _stage_next(self, group: Group, live: dict[int, Live], batch: LoadedGroup) -> Staged | None:
        """With sharing and balanced prefetch: on CUDA copy the next group's blocks into the room this group leaves
        (engine/kv/staging.py), while it computes; on the emulated device only note what that would move (its
        timing model). None when nothing was copied."""
        if self.home is Tier.DEVICE or not self.share or not self.prefetch:
            return None
        if not self.overlap:  # no copies: what they would move, for the timing model
            members, room, kept = self._room(group, live, batch)
            ahead, carry = blocks_ahead(self.store, self.blocks, members, room, kept), self._carry(batch) or {}
            crossing = self.blocks.num_tokens([b for b in ahead.blocks if b not in carry]) * self.store.token_bytes
            self._modelled = (group, ahead, crossing)
            return None
        return self._copy_ahead(group, live, batch)

    def _take_modelled(self, batch: LoadedGroup) -> None:
        """Emulated: the group's share of copy-ahead, for its timing and its event (also when it loaded beside
        the group before, which on CUDA would have copied it ahead while that group computed)."""
        modelled, self._modelled = self._modelled, None
        if modelled is not None and modelled[0] is batch.group and not batch.early:
            batch.staged, batch.ahead_bytes = modelled[1].members, modelled[2]

    def _copy_ahead(self, group: Group, live: dict[int, Live], batch: LoadedGroup) -> Staged | None:
        members, room, kept = self._room(group, live, batch)
        return stage_ahead(self.store, self.blocks, group, members, room, self._carry(batch) or {}, kept)

    def _room(self, group: Group, live: dict[int, Live], batch: LoadedGroup):
        """(the next group's members, the slots copy-ahead may take for a number wanted, the kept prefix's blocks)."""
        members = [live[c] for c in group.candidates]
        work = [work_of(m, self.blocks) for m in members]
        floor = self.prefixes.capacity if self.prefixes.keep else 0
        shape = group_shape(work, self.blocks.block_size, cascade=self.cascade, prefix_floor=floor,
                            prefix_in_place=self.cascade and self.prefixes.serves(work))  # fmt: skip
        need = shape.slots(self.step_tokens, self.blocks.block_size)
        room = lambda wanted: stage_room(self.store, batch.runs, need, wanted)  # noqa: E731
        kept = self.prefixes.kept
        return members, room, kept.ids if kept is not None else ()

    def _staged_carry(self, group: Group) -> Placed | None:
        """Where the blocks copied ahead for `group` are (a carry for its load), if any were."""
        staged = self._staged
        return staged.placed if staged is not None and staged.group is group else None

    def _drop_staged(self) -> None:
        staged, self._staged = self._staged, None
        if staged is not None:
            self.store.release(staged.run)

    def _load_beside(self, group: Group, live: dict[int, Live], batch: LoadedGroup) -> LoadedGroup | None:
        """Load the next group after `batch`'s write-back and before its unload, taking on its placements;
        None when the pool has no room for both (the next group then loads after the unload, as without
        the carry). `batch` has computed, so it lets go of the kept prefix first: a next group sharing
        part of it refills it in place, as after the unload."""
        self._stop_reading_kept(batch)
        before = self.store.counters.step["h2d"]
        try:
            return self._load(group, live, {**(self._staged_carry(group) or {}), **batch.placed}, strict=True)
        except OUT_OF_MEMORY:
            self._moved_ahead = self.store.counters.step["h2d"] - before  # a kept prefix refilled before it failed
            return None

    def _decode(self, batch: LoadedGroup, should_stop) -> tuple[list[RowResult], float]:
        rows = [
            Row(m.id, m.pending, self.blocks.num_tokens(m.table), m.generator, m.prefix, m.continuations)
            for m in batch.members
        ]
        cache = arena_cache(self.config, batch.arena, batch.width)
        forward = {"kv_prefix": batch.prefix} if batch.prefix is not None else {}
        if self.lend:
            parents = batch.prefix.parents if batch.prefix is not None else None
            forward["lend"] = Lending(self.store, batch.arena, batch.width, batch.own, [m.id for m in batch.members],
                                      parents, batch.saved, batch.runs, batch.placed)  # fmt: skip
        return self.decode(cache, batch.mask, rows, should_stop, **forward)

    # -- loading ----------------------------------------------------------------------------
    def _load(self, group: Group, live: dict[int, Live], carry: Placed | None = None, strict: bool = False,
              early: bool = False) -> LoadedGroup:  # fmt: skip
        """The shared prefix (in place, kept from the previous group, or staged in a run of its own),
        then one run of the device pool for the arena and, with cascade attention, the parent level.
        `carry`: the previous group's placements, still on the device; `strict`: a prefix that cannot be
        kept at the step's longest is an error (PoolExhausted) instead of staged at its own length;
        `early` (a prefetch): the arena's run is taken first, so a load that finds no room copies nothing."""
        members = [live[c] for c in group.candidates]
        layout = layout_of(members, self.blocks, self.cascade)
        shapes = layout.shapes(self.store.slot_shape, len(members), self.step_tokens)
        runs, kept, before = [], None, self.store.counters.step["h2d"]
        try:
            with self.store.loading() as loaded:
                if early:
                    tensors, run = self.store.working(shapes)
                    runs.append(run)
                kv, kept = self.prefixes.load(layout.prefix_ids, group, runs, carry or {}, strict)
                if not early:
                    tensors, run = self.store.working(shapes)
                    runs.append(run)
                users = block_users(members, len(layout.prefix_ids))
                copier = BlockCopier(self.store, self.blocks, self.share, users, carry)
                rows = len(members)
                parents = load_parents(self.store, layout, tensors[1], copier, rows, self.lend) if layout.kin else None
                arena, mask = load_rows(self.store, members, layout, tensors[0], copier, self.share)
        except BaseException:
            for held in runs:
                self.store.release(held)
            if kept is not None:
                self.prefixes.release(kept)
            raise
        layers = tuple((kv[i, 0], kv[i, 1]) for i in range(self.store.slot_shape[0])) if kv is not None else ()
        prefix = SharedPrefix(layers, parents) if layers or parents is not None else None
        h2d = self.store.counters.step["h2d"] - before
        return LoadedGroup(
            group, members, layout.prefix_ids, prefix, layout.width, arena, mask, runs, h2d, loaded, kept,
            copier.placed, own=tuple(layout.lengths),
        )

    def _unload(self, batch: LoadedGroup | None) -> None:
        if batch is None:
            return None
        for run in batch.runs:
            self.store.release(run)
        batch.runs.clear()
        self._stop_reading_kept(batch)
        return None

    def _stop_reading_kept(self, batch: LoadedGroup) -> None:
        if batch.kept is not None:
            self.prefixes.release(batch.kept)
            batch.kept = None

    # -- writing back -----------------------------------------------------------------------
    def _write_back(self, batch: LoadedGroup, results: list[RowResult]) -> None:
        for row, (member, result) in enumerate(zip(batch.members, results, strict=True)):
            n = len(result.fed)
            if n == 0:
                continue
            plan = self.blocks.append(member.table, result.fed, self.home)
            self.store.write(plan, columns(batch.arena, batch.width, batch.saved, row, 0, n), self.home, member.id)
            member.table = plan.table
            member.pending = result.sampled[-1]
            for child, ahead in enumerate(result.aheads):
                self._write_ahead(batch, ahead.row if ahead.row >= 0 else row, member, child, ahead)

    def _write_ahead(self, batch: LoadedGroup, row: int, member: Live, child: int, ahead: RowResult) -> None:
        """Keep a speculative run's KV (arena columns of row `row` from its `start`: the member's own row, or
        one lent to it) as child `child`'s table: a fork of the member's blocks with the run's tokens
        appended (copy-on-write of a shared tail)."""
        plan = self.blocks.append(self.blocks.fork(member.table), ahead.fed, self.home)
        kv = columns(batch.arena, batch.width, batch.saved, row, ahead.start, len(ahead.fed))
        self.store.write(plan, kv, self.home, member.id)
        member.ahead[child] = Ahead(plan.table, ahead.sampled[-1], tuple(ahead.sampled))
