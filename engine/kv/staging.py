"""Prefetch into the room a group leaves (CUDA): the next group's first members' blocks cross PCIe early.

Balanced groups each take most of the budget, so the next group's whole load rarely fits beside the
group computing (`python -m benchmarks.prefetch_room`: never, on the ladder's workloads). The paper's
balanced grouping prefetches into the room that is left instead: the next group's blocks resting on
the host, member by member in its order, are copied on the copy stream while this group computes
into a run of their own, no larger than the pool can spare without leaving the next group's load
short. The next group's load then finds them placed there
and copies them on the device (a carry, engine/kv/arena.py) instead of over PCIe. With prefix-aware
order the blocks this group placed that the next one needs are copied there too, on the device: they
would otherwise leave with this group and cross PCIe again.

The emulated device does not stage, so its bytes stay the paper's; its timing model hides the PCIe
bytes copy-ahead would move for a group behind the compute of the group before
(engine/kv/groups.py `_account`), from the same choice of blocks (`blocks_ahead`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.kv.arena import BlockCopier, Placed, block_users
from engine.kv.blocks import BlockManager, Tier
from engine.kv.policy import OUT_OF_MEMORY, Group, Live
from engine.kv.pool import PoolExhausted, Run
from engine.kv.store import KVStore


@dataclass
class Staged:
    """Blocks of `group` copied ahead into `run`: where each is (`placed`, a carry for its load), and the
    members whose every block that had to cross was among them (`members`)."""

    group: Group
    placed: Placed
    run: Run
    members: tuple[int, ...]


def stage_room(store: KVStore, current: Sequence[Run], next_slots: int, wanted: int) -> int:
    """The most slots, up to `wanted`, a staging run may take now so that once this group's runs (`current`)
    are freed the next group's load still finds one run of `next_slots`: tried on a copy of the pool's
    allocator, halving until it fits (a run taken from the start, the load's from the end)."""
    allocator = store.pools[Tier.DEVICE].allocator
    size = min(wanted, allocator.limit - allocator.used)
    while size > 0:
        trial = copy.deepcopy(allocator)
        try:
            trial.allocate(size)
            for run in current:
                trial.free(run)
            trial.allocate(max(1, next_slots), from_end=True)
            return size
        except PoolExhausted:
            size //= 2
    return 0


@dataclass(frozen=True)
class CopyAhead:
    """What copy-ahead takes of a group: its blocks in order, their tokens, the members it takes whole."""

    blocks: tuple[int, ...]
    tokens: int
    members: tuple[int, ...]


def blocks_ahead(store: KVStore, blocks: BlockManager, members: Sequence[Live], room: Callable[[int], int],
                 kept: Sequence[int] = ()) -> CopyAhead:  # fmt: skip
    """The blocks of `members` not already on the device for good (resting there, or in the kept prefix `kept`),
    member by member, as many as `room(slots wanted)` slots hold."""
    skip = set(kept) | {b for m in members for b in m.table if store.holds(b, Tier.DEVICE)}
    order: dict[int, None] = {}
    for member in members:
        order.update((b, None) for b in member.table if b not in skip)
    wanted = -(-blocks.num_tokens(list(order)) // blocks.block_size)
    slots = room(wanted) if order else 0
    chosen, tokens = [], 0
    for block_id in order:
        size = blocks.blocks[block_id].num_tokens
        if -(-(tokens + size) // blocks.block_size) > slots:
            break
        chosen.append(block_id)
        tokens += size
    done = skip | set(chosen)
    whole = tuple(m.id for m in members if all(b in done for b in m.table)) if chosen else ()
    return CopyAhead(tuple(chosen), tokens, whole)


def stage_ahead(store: KVStore, blocks: BlockManager, group: Group, members: Sequence[Live],
                room: Callable[[int], int], carry: Placed, kept: Sequence[int] = ()) -> Staged | None:  # fmt: skip
    """Copy `blocks_ahead` into one run (PCIe, or on the device for a block in `carry`); None when none fit."""
    ahead = blocks_ahead(store, blocks, members, room, kept)
    chosen, tokens = list(ahead.blocks), ahead.tokens
    if not chosen:
        return None
    L, _, H, _, D = store.slot_shape
    run = None
    try:
        with store.loading():
            (stage,), run = store.working([(L, 2, H, tokens, D)], from_end=False)
            copier = BlockCopier(store, blocks, True, block_users(members, 0), carry)
            copier.copy(stage, 0, chosen)
    except OUT_OF_MEMORY:  # fragmented (no run that long), or a copy's staging buffer found no device memory
        if run is not None:  # copies already queued into it may still write it: compute waits before it reuses it
            store.wait_copies()
            store.release(run)
        return None
    return Staged(group, copier.placed, run, ahead.members)
