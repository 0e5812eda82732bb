"""What loading a group takes from the device pool: the planners' figure for `GroupExecutor._load`, from `Work` alone.

With cascade attention a loaded group is the shared prefix (read in place when it already sits
in consecutive device slots, else staged once in a run of its own), a parent level holding once
the blocks each family (rows forked from one candidate) shares after the prefix, and an arena
with each row's remaining tokens plus the step's `k`; parent level and arena are one run. Without
cascade every row holds its whole history in the arena. Each run is a whole number of slots, so
the figure is counted in slots: it is what the pool hands out, not an estimate of it.

Token counts come from block counts because every block of a table is full except perhaps its
last: `n` leading blocks of a row hold `min(n * block_size, row tokens)` tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.kv.arena import families
from engine.kv.policy import Work, common_prefix


@dataclass(frozen=True)
class GroupShape:
    """Tokens of each part of a loaded group (a slot holds `block_size` tokens of every layer and head)."""

    prefix: int  # the shared prefix, staged in a run of its own (0: none, or read in place)
    families: int  # G: rows of the parent level (0: no parent level)
    height: int  # the parent level's columns: the tallest family's shared history
    rows: int  # B
    width: int  # W: the longest row's own tokens (the arena holds W + k columns)

    def slots(self, step_tokens: int, block_size: int) -> int:
        """Slots of the pool this group takes: the staged prefix's run, then one run for arena and parent level."""
        arena = self.rows * (self.width + step_tokens) + self.families * self.height
        return _ceil(self.prefix, block_size) + max(1, _ceil(arena, block_size))


def group_shape(members: Sequence[Work], block_size: int, *, cascade: bool, prefix_in_place: bool = False,
                prefix_floor: int = 0) -> GroupShape:  # fmt: skip
    """The parts `GroupExecutor._load` allocates for `members`; `prefix_in_place`: the shared prefix is one
    run of device slots (in_device's prompt), so it takes none; `prefix_floor`: stage it at least this long
    (a prefix kept across groups is sized for the step's longest, engine/kv/kept_prefix.py `PrefixKeeper.load`)."""
    longest = max((m.tokens for m in members), default=0)
    if not cascade:
        return GroupShape(0, 0, 0, len(members), longest)
    prefix_ids = common_prefix([m.table for m in members])
    skip = len(prefix_ids)
    prefix = _tokens(skip, members, block_size)
    kin = families(members, skip)
    heights = [_tokens(skip + len(f.blocks), [members[r] for r in f.rows], block_size) - prefix if f.blocks else 0
               for f in kin]  # fmt: skip
    if not any(f.blocks for f in kin):
        kin, heights = [], []
    shared = {row: height for f, height in zip(kin, heights, strict=True) for row in f.rows}
    width = max((m.tokens - prefix - shared.get(row, 0) for row, m in enumerate(members)), default=0)
    staged = 0 if prefix_in_place else max(prefix, prefix_floor)  # a kept prefix may stay while a group has none
    return GroupShape(staged, len(kin), max(heights, default=0), len(members), width)


def group_working_bytes(members: Sequence[Work], step_tokens: int, token_bytes: int, block_size: int, *,
                        cascade: bool, prefix_in_place: bool = False, prefix_floor: int = 0) -> int:  # fmt: skip
    """Device bytes the pool hands out to load `members` as one group: whole slots, as `KVStore.working` takes them."""
    if not members:
        return 0
    shape = group_shape(members, block_size, cascade=cascade, prefix_in_place=prefix_in_place,
                        prefix_floor=prefix_floor)  # fmt: skip
    return shape.slots(step_tokens, block_size) * block_size * token_bytes


def _tokens(blocks: int, rows: Sequence[Work], block_size: int) -> int:
    """Tokens in the first `blocks` blocks that every one of `rows` starts with (all full but perhaps a last)."""
    return min(blocks * block_size, min(r.tokens for r in rows))


def _ceil(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)
