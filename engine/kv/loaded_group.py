"""A group loaded for decoding: where its members' KV goes on the device, and the copies that put it there.

A loaded group is a shared prefix (the blocks every member's table starts with) read in place
when it already sits in consecutive device slots, else staged once (engine/kv/kept_prefix.py); with
cascade attention, a parent level `[L, 2, G, H, Wp, D]` holding once the history each parent's
children share (engine/kv/arena.py); and an *arena* `[L, 2, B, H, W + k, D]` holding each member's
own remaining blocks left-padded to `W` columns, with room for the step's `k` new tokens. All are
runs of the one device pool, so nothing is allocated per step and a shared block is never
duplicated per row. `layout_of` plans them from the members' tables; engine/kv/groups.py loads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.kv.arena import BlockCopier, Family, Placed, families, query_slots
from engine.kv.attention import ParentHistory, SharedPrefix, padding_mask
from engine.kv.blocks import BlockManager
from engine.kv.kept_prefix import KeptPrefix
from engine.kv.lending import Saved
from engine.kv.policy import Group, Live, common_prefix
from engine.kv.pool import Run
from engine.kv.store import KVStore
from engine.kv.streams import device_tensor


@dataclass
class LoadedGroup:
    group: Group
    members: list[Live]
    prefix_ids: list[int]
    prefix: SharedPrefix | None
    width: int  # W: arena columns that hold the members' own KV
    arena: torch.Tensor  # [L, 2, B, H, W + k, D]
    mask: torch.Tensor | None  # [B, W]: 1 real, 0 padding; None when no row is padded
    runs: list[Run]  # device runs to release after the group
    h2d_bytes: int  # what loading it moved over PCIe
    loaded: object = None  # CUDA event recorded after the load's copies (None: already in order)
    kept: KeptPrefix | None = None  # the executor's kept prefix, when this group reads it
    placed: Placed = field(default_factory=dict)  # where its load first copied each host block (the carry)
    early: bool = False  # loaded by a prefetch, while the group before it computed (CUDA)
    staged: tuple[int, ...] = ()  # members whose blocks were copied ahead into the room left (staging.py)
    ahead_bytes: int = 0  # emulated device: PCIe bytes copy-ahead would have moved for it (its timing model)
    own: tuple[int, ...] = ()  # each member's own tokens, in the arena's columns just before `width`
    saved: Saved = field(default_factory=dict)  # what lent rows had decoded before (engine/kv/lending.py)


@dataclass(frozen=True)
class Layout:
    """Where a group's KV goes: the shared prefix's blocks, the families whose parent history is read once
    (`kin`, each `heights` tokens tall), and each member's own blocks (`own`, `lengths` tokens), left-padded
    to the arena's `width` W."""

    prefix_ids: list[int]
    kin: list[Family]
    own: list[list[int]]
    lengths: list[int]
    width: int
    heights: list[int]

    def shapes(self, slot_shape: tuple[int, ...], rows: int, step_tokens: int) -> list[tuple[int, ...]]:
        """The arena `[L, 2, B, H, W + k, D]` and, with families, the parent level `[L, 2, G, H, Wp, D]`."""
        L, _, H, _, D = slot_shape
        shapes = [(L, 2, rows, H, self.width + step_tokens, D)]
        return shapes + ([(L, 2, len(self.kin), H, max(self.heights), D)] if self.kin else [])


def layout_of(members: list[Live], blocks: BlockManager, cascade: bool) -> Layout:
    """The group's layout: with cascade attention the members' common blocks are the shared prefix and a
    family's common blocks after it its parent history; without it every member holds its whole table."""
    prefix_ids = common_prefix([m.table for m in members]) if cascade else []
    skip = len(prefix_ids)
    kin = families(members, skip) if cascade else []
    kin = kin if any(f.blocks for f in kin) else []  # no parent history after the prefix: no such level
    shared = {row: len(f.blocks) for f in kin for row in f.rows}
    own = [m.table[skip + shared.get(row, 0) :] for row, m in enumerate(members)]
    lengths = [blocks.num_tokens(t) for t in own]
    heights = [blocks.num_tokens(f.blocks) for f in kin]
    return Layout(prefix_ids, kin, own, lengths, max(lengths, default=0), heights)


def load_parents(store: KVStore, layout: Layout, parents: torch.Tensor, copier: BlockCopier, rows: int,
                 spare: bool) -> ParentHistory:  # fmt: skip
    """Each family's shared blocks once, into its row `g` of `parents` `[L, 2, G, H, Wp, D]` (padding zeroed:
    it is masked, but must not hold NaN); `spare`: rows may be lent (a spare query slot per family)."""
    kin, heights = layout.kin, layout.heights
    for g, (family, height) in enumerate(zip(kin, heights, strict=True)):
        copier.copy(parents[:, :, g], 0, family.blocks)
        if height < parents.shape[4]:
            parents[:, :, g, :, height:].zero_()
    mask = None
    if min(heights) < parents.shape[4]:
        places = torch.arange(parents.shape[4], device=store.device)
        mask = places[None, :] < device_tensor(heights, torch.long, store.device)[:, None]  # [G, Wp]
    slots, width = query_slots(kin, rows, store.device, spare=spare)
    layers = tuple((parents[i, 0], parents[i, 1]) for i in range(parents.shape[0]))
    return ParentHistory(layers, mask, slots, width)


def load_rows(store: KVStore, members: list[Live], layout: Layout, arena: torch.Tensor, copier: BlockCopier,
              share: bool) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """Each member's own blocks, left-padded into the arena `[L, 2, B, H, W + k, D]`; the padding mask `[B, W]`.
    Without `share` each member's bytes are counted as its own."""
    width = layout.width
    for row, (member, table, length) in enumerate(zip(members, layout.own, layout.lengths, strict=True)):
        column = width - length
        if column:
            arena[:, :, row, :, :column].zero_()  # padding is masked, but must not hold NaN
        copier.copy(arena[:, :, row], column, table, () if share else [member.id])
    return arena, padding_mask(layout.lengths, width, store.device)
