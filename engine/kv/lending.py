"""Lending a row of a loaded group to another row's candidate, in the middle of a step (FlashTTS).

FlashTTS gives the batch slots that rows finished with to the best-ranked beams' continuations.
A row here decodes its own candidate's step, then its children's (engine/runner.py); once its
candidate has none left to start, the runner may lend the row to a candidate that has. The row
then needs that candidate's history instead of its own: the group's prefix it already reads,
the lender's family in the parent level (a query slot of that family: the load leaves spare
ones), and the lender's own columns of the arena and its step so far. Those are copied on the
device into the same columns of the row, so the lender's mask holds for it too; what the row
decodes next lands in later columns. What the row decoded before (its own step and runs, or an
earlier lent run) is first saved in a run of the device pool, from which the group's write-back
takes it: the candidates' tables change only at the write-back, so a group that runs out of
memory is retried from the same state. With no room in the pool for that, the row is not lent.
On CUDA the copy stream may still read what a lend writes (the last group's write-back, the next
group's prefetch of this one's loaded columns): compute waits for it before a group's first lend,
and the lent row's loaded blocks leave the group's carry.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.kv.arena import Placed
from engine.kv.attention import ParentHistory
from engine.kv.pool import PoolExhausted, Run
from engine.kv.store import KVStore

Saved = dict[int, list[tuple[int, torch.Tensor]]]  # row -> (forwards saved, their columns [L, 2, H, n, D]) per lend


class Lending:
    """The `Lend` callable of one loaded group (engine.speculative_runs.Lend): a save and a copy on the device,
    and a slot."""

    def __init__(self, store: KVStore, arena: torch.Tensor, width: int, own: Sequence[int], owners: Sequence[int],
                 parents: ParentHistory | None, saved: Saved, runs: list[Run], placed: Placed) -> None:  # fmt: skip
        self.store, self.arena, self.width = store, arena, width
        self.own, self.owners, self.parents = list(own), list(owners), parents
        self.saved, self.runs = saved, runs  # the group's: the write-back reads them, the unload releases them
        self.placed = placed  # the group's carry: where its load put each block, for the next group to copy from
        self.slots: list[int] | None = None  # each row's query slot of the parent level, read once when first lent
        self.waited = False  # compute has waited for the copy stream (once a group, before its first lend)

    def __call__(self, row: int, lender: int, tokens: int, forward: int) -> bool:
        """Before `forward`: make `row` hold the lender's history and its step's first `tokens` tokens. False
        (nothing done) when the lender's family has no free query slot or the pool no room to save the row's."""
        slot = self._free_slot(lender) if self.parents is not None else None
        if self.parents is not None and slot is None:
            return False
        if not self.waited:  # on CUDA the copy stream may still read what a lend writes: the last group's
            # write-back reads runs `_save` may take, and the next group's prefetch carries the lent row's loaded
            # columns (before `width`), which the lend overwrites; one wait a group, late in its step
            self.store.wait_copies()
            self.waited = True
        if forward and not self._save(row, forward):
            return False
        start, end = self.width - self.own[lender], self.width + tokens
        if end > start:  # [L, 2, H, n, D] of the arena [L, 2, B, H, W + k, D]
            lent = self.arena[:, :, lender, :, start:end]
            self.store.copy(self.arena[:, :, row, :, start:end], lent, "d2d", (self.owners[lender],))
            self._forget_placed(row)
        if slot is not None:
            self.parents.slots[row] = slot
            self.slots[row] = slot
        return True

    def _forget_placed(self, row: int) -> None:
        """The row's loaded blocks are overwritten: a group loaded after this lend must not carry them from here
        (one loaded before it, a prefetch on CUDA, read them before the lend's wait for the copy stream)."""
        start = self.arena[:, :, row].data_ptr()
        for block_id in [b for b, (tensor, _) in self.placed.items() if tensor.data_ptr() == start]:
            del self.placed[block_id]

    def _save(self, row: int, forward: int) -> bool:
        """Copy the row's columns of forwards `0 .. forward - 1` into a run of the pool, for the write-back."""
        L, _, H, _, D = self.store.slot_shape
        try:
            (kept,), run = self.store.working([(L, 2, H, forward, D)])
        except PoolExhausted:
            return False
        self.runs.append(run)
        source = self.arena[:, :, row, :, self.width : self.width + forward]
        self.store.copy(kept, source, "d2d", (self.owners[row],))
        self.saved.setdefault(row, []).append((forward, kept))
        return True

    def _free_slot(self, lender: int) -> int | None:
        """A query slot of the lender's family that no row holds, or None (also in a plan-only run, whose
        slots hold no values to read)."""
        if self.parents.slots.is_meta:
            return None
        if self.slots is None:
            self.slots = self.parents.slots.tolist()
        width = self.parents.width
        family = self.slots[lender] // width
        taken = set(self.slots)
        return next((s for s in range(family * width, (family + 1) * width) if s not in taken), None)


def columns(arena: torch.Tensor, width: int, saved: Saved, row: int, start: int, count: int) -> torch.Tensor:
    """`[L, 2, H, count, D]`: what row `row` decoded at forwards `start .. start + count - 1`, from the arena or,
    when the row was lent after them, from what the first such lend saved."""
    for forwards, kept in saved.get(row, ()):
        if start < forwards:
            return kept[:, :, :, start : start + count]
    return arena[:, :, row, :, width + start : width + start + count]
