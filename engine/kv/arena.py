"""Gathering a group's KV from its blocks into working tensors: the parent level and the rows' arena.

At a step's start every child's block table is its parent's (forked), so the `M` children of
a parent share all of its history. After the prefix every member shares (read in place), a
group is split into *families* (the rows forked from one parent); the blocks a family's rows
all start with are gathered once per family into the parent level `[L, 2, G, H, Wp, D]`, and
only what a row does not share with its siblings (e.g. the tokens its parent speculated for
it) goes into its own row of the arena. Without that level each child gathered the whole
history of its parent, `M` times per parent per step.

Copies go block run by block run: blocks in consecutive slots of one run of the store (a
prompt, a step's new blocks) cross in one copy. With sharing, a block on the host crosses
once per group; a second use copies it on the device from where it was first placed. A load may
also take the previous group's placements (`carry`, prefix-aware order): a block that group
placed crosses PCIe no more, it is copied on the device from there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from engine.kv.blocks import BlockManager, Tier
from engine.kv.policy import Live, Work, common_prefix
from engine.kv.store import KVStore
from engine.kv.streams import device_tensor


@dataclass(frozen=True)
class Family:
    """The rows of a group forked from one parent and the blocks (after the group's prefix) they all start with."""

    rows: tuple[int, ...]  # indices into the group's members
    blocks: tuple[int, ...]


def families(members: Sequence[Live | Work], skip: int) -> list[Family]:
    """Members by the candidate they were forked from (`source`; none: a family of its own), in the
    order of their first row; each family's blocks are the common start of its rows' tables after `skip`
    blocks. Grouping only decides what is shared: any grouping reads exactly each row's own KV. The
    planners apply the same rule to `Work` (engine/kv/working.py)."""
    rows: dict[object, list[int]] = {}
    for index, member in enumerate(members):
        key = ("row", member.id) if member.source is None else member.source
        rows.setdefault(key, []).append(index)
    return [
        Family(tuple(r), tuple(common_prefix([members[i].table[skip:] for i in r]))) for r in rows.values()
    ]


def block_users(members: Sequence[Live], skip: int) -> dict[int, list[int]]:
    """Each block after the first `skip` of the members' tables: the members whose tables hold it."""
    users: dict[int, list[int]] = {}
    for member in members:
        for block_id in member.table[skip:]:
            users.setdefault(block_id, []).append(member.id)
    return users


def query_slots(groups: Sequence[Family], count: int, device, spare: bool = False) -> tuple[torch.Tensor | None, int]:
    """(slot of each row among `len(groups) * M` query slots, `M`): family `g`'s rows take slots
    `g * M ...`; None when that is every row in order (rows ordered by parent, `M` each). With `spare`
    each family has as many slots again, free for rows lent to it (engine/kv/lending.py)."""
    width = max(len(f.rows) for f in groups) * (2 if spare else 1)
    slots = [0] * count
    for g, family in enumerate(groups):
        for i, row in enumerate(family.rows):
            slots[row] = g * width + i
    if slots == list(range(count)) and len(groups) * width == count:
        return None, width
    return device_tensor(slots, torch.long, device), width


def split_runs(block_ids: Sequence[int], continues: Callable[[int, int], bool]) -> list[list[int]]:
    """`block_ids` in order, cut into runs wherever `continues(previous, block_id)` says one copy cannot go on."""
    runs: list[list[int]] = []
    for block_id in block_ids:
        if runs and continues(runs[-1][-1], block_id):
            runs[-1].append(block_id)
        else:
            runs.append([block_id])
    return runs


Placed = dict[int, tuple[torch.Tensor, int]]  # block -> (working tensor, column) its KV was first copied to


def placements(blocks: BlockManager, block_ids: Sequence[int], tensor: torch.Tensor, column: int = 0) -> Placed:
    """Where `block_ids`, copied one after another into `tensor` from `column` on, each begin."""
    placed: Placed = {}
    for block_id in block_ids:
        placed[block_id] = (tensor, column)
        column += blocks.blocks[block_id].num_tokens
    return placed


class BlockCopier:
    """Copies block tables into columns of working tensors `[L, 2, H, T, D]`, counting every copy.

    `carry`: where the previous group placed blocks, in tensors still alive; a block found there is
    copied d2d instead of crossing PCIe, and then counts as placed by this copier (so the next group
    may take it on from here)."""

    def __init__(self, store: KVStore, blocks: BlockManager, share: bool, users: dict[int, list[int]],
                 carry: Placed | None = None) -> None:  # fmt: skip
        self.store, self.blocks, self.share, self.users = store, blocks, share, users
        self.placed: Placed = {}
        self.carry: Placed = carry or {}

    def copy(self, dst: torch.Tensor, column: int, block_ids: Sequence[int], owners: Sequence[int] = ()) -> None:
        """Copy `block_ids` into `dst` from `column` on; the bytes go to `owners`, or to each block's users
        in the group when none are named."""
        for run in self._runs(block_ids, bool(owners)):
            n = self.blocks.num_tokens(run)
            target = dst[:, :, :, column : column + n]
            placed = self._on_device(run[0])
            if placed is not None:  # on the device already: from there
                source, at = placed
                self.store.copy(target, source[:, :, :, at : at + n], "d2d", owners or self.users[run[0]])
                if self.share and run[0] not in self.placed:  # carried: placed here now
                    self._remember(run, dst, column)
            else:
                tier = self.store.tier_of(run[0])
                source = self.store.span(run[0], tier, n)
                self.store.copy(target, source, self.store.direction(tier, Tier.DEVICE), owners or self.users[run[0]])
                if self.share and tier is Tier.HOST:
                    self._remember(run, dst, column)
            column += n

    def _on_device(self, block_id: int) -> tuple[torch.Tensor, int] | None:
        """Where this group placed the block, else where the previous group did (None: neither)."""
        placed = self.placed.get(block_id) if self.share else None
        return placed if placed is not None else self.carry.get(block_id)

    def _remember(self, run: list[int], dst: torch.Tensor, column: int) -> None:
        self.placed.update(placements(self.blocks, run, dst, column))

    def _runs(self, block_ids: Sequence[int], named: bool) -> list[list[int]]:
        """`block_ids` cut into runs that one copy can move: full blocks followed by the next block at the
        next position of the same source (a run of the store, or where an earlier copy placed them), with
        the same users."""
        return split_runs(block_ids, lambda previous, block_id: self._continues(previous, block_id, named))

    def _continues(self, previous: int, block_id: int, named: bool) -> bool:
        size = self.blocks.block_size
        if self.blocks.blocks[previous].num_tokens != size:
            return False
        if not named and self.users[previous] != self.users[block_id]:
            return False
        before, placed = self._on_device(previous), self._on_device(block_id)
        if before is None or placed is None:  # both copied to the device before (side by side there), or neither
            return before is None and placed is None and self._adjacent(previous, block_id)
        return placed[0] is before[0] and placed[1] == before[1] + size

    def _adjacent(self, previous: int, block_id: int) -> bool:
        """Whether `block_id` follows `previous` in one run of the store, in the same tier."""
        tier = self.store.tier_of(previous)
        return self.store.tier_of(block_id) is tier and self.store.follows(block_id, previous, tier)
