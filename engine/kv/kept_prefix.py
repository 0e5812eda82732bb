"""A loaded group's shared prefix: read in place, read or refilled from the prefix kept from the group before
(prefix-aware order), else staged once into a run of its own (engine/kv/groups.py loads the rest)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.kv.arena import BlockCopier, Placed, placements
from engine.kv.blocks import BlockManager, Tier
from engine.kv.policy import Group, Work, common_prefix
from engine.kv.pool import PoolExhausted, Run
from engine.kv.store import KVStore


@dataclass
class KeptPrefix:
    """A staged prefix held on the device across a group boundary (prefix-aware order)."""

    ids: tuple[int, ...]
    full: torch.Tensor  # [L, 2, H, capacity, D]: the prefix in its first columns
    run: Run
    users: int = 0  # loaded groups reading it now

    def shared_with(self, prefix_ids: Sequence[int]) -> int:
        """How many leading blocks `prefix_ids` has in common with this prefix."""
        n = 0
        while n < min(len(self.ids), len(prefix_ids)) and self.ids[n] == prefix_ids[n]:
            n += 1
        return n

    def holds(self, prefix_ids: Sequence[int], tokens: int) -> tuple[str | None, int]:
        """How it can hold `prefix_ids` (`tokens` tokens): "read" (a leading part of it, in place), "refill"
        (its shared blocks stay and the rest is copied in, once no loaded group reads it), or None; and how
        many leading blocks it shares with them."""
        shared = self.shared_with(prefix_ids)
        if shared == len(prefix_ids):
            return "read", shared
        return ("refill" if shared and self.full.shape[3] >= tokens else None), shared


class PrefixKeeper:
    """Where each loaded group's shared prefix comes from, and the one prefix kept across groups (`kept`).

    A kept prefix is released once it is no longer kept and no loaded group reads it (`users`)."""

    def __init__(self, store: KVStore, blocks: BlockManager) -> None:
        self.store, self.blocks = store, blocks
        self.keep = False  # prefix-aware order: a staged prefix stays for the next group that shares it
        self.capacity = 0  # tokens of the step's longest shared prefix (a kept run is sized for it)
        self.kept: KeptPrefix | None = None

    def load(self, prefix_ids: list[int], group: Group, runs: list[Run], carry: Placed, strict: bool):
        """(`[L, 2, H, P, D]`, the kept prefix it reads or None) for the group's shared blocks. A run staged and
        not kept joins `runs`; `strict`: a prefix that cannot be kept at the step's longest is an error
        (PoolExhausted) instead of staged at its own length."""
        if not prefix_ids:
            return None, None
        in_place = self.store.contiguous(prefix_ids, Tier.DEVICE)
        if in_place is not None:
            return in_place, None
        tokens = self.blocks.num_tokens(prefix_ids)
        kept = self.kept
        holds, shared = kept.holds(prefix_ids, tokens) if kept is not None else (None, 0)
        if holds == "read":
            kept.users += 1  # a leading part of the kept prefix: read in place
            return kept.full[:, :, :, :tokens], kept
        if holds == "refill" and kept.users == 0:
            self._fill(kept.full, prefix_ids, shared, group, carry)  # the shared blocks stay; only the rest crosses
            kept.ids, kept.users = tuple(prefix_ids), 1
            return kept.full[:, :, :, :tokens], kept
        if kept is not None and shared and kept.users:  # a prefetch while a group reads it: its part is copied d2d
            carry = {**carry, **self._placements(kept, shared)}
        self.drop()
        capacity = max(tokens, self.capacity) if self.keep else tokens  # a run not kept holds its own
        try:
            return self._stage(prefix_ids, group, runs, capacity, carry)
        except PoolExhausted:
            if capacity <= tokens or strict:
                raise
            return self._stage(prefix_ids, group, runs, tokens, carry)  # no room to keep it for the longest prefix

    def serves(self, work: Sequence[Work]) -> bool:
        """Whether the kept prefix will hold `work`'s shared prefix when it loads (read in place, or refilled in
        place once the group computing lets go of it): then that load stages no prefix of its own."""
        if self.kept is None:
            return False
        prefix_ids = common_prefix([w.table for w in work])
        return self.kept.holds(prefix_ids, self.blocks.num_tokens(prefix_ids))[0] is not None

    def restore(self, previous: KeptPrefix | None) -> None:
        """After a load that failed (a prefetch with no room), `previous` is kept again; a prefix that load
        staged to keep goes."""
        if self.kept is not previous:
            failed, self.kept = self.kept, previous
            self._release_if_unused(failed)

    def release(self, kept: KeptPrefix) -> None:
        """A loaded group no longer reads `kept`."""
        kept.users -= 1
        self._release_if_unused(kept)

    def drop(self) -> None:
        """At step end, on a retry, or for a group that shares nothing with it: the kept prefix goes
        once no loaded group reads it."""
        kept, self.kept = self.kept, None
        self._release_if_unused(kept)

    def _release_if_unused(self, kept: KeptPrefix | None) -> None:
        if kept is not None and kept.users == 0 and kept is not self.kept:
            self.store.release(kept.run)

    def _placements(self, kept: KeptPrefix, shared: int) -> Placed:
        """Where the kept prefix holds its first `shared` blocks (a carry: the next stage copies them on the device)."""
        return placements(self.blocks, kept.ids[:shared], kept.full)

    def _stage(self, prefix_ids: list[int], group: Group, runs: list[Run], capacity: int, carry: Placed):
        """Copy the shared prefix once into a run of its own; with prefix order the run (sized for the
        step's longest shared prefix) is kept for the next group instead of released."""
        L, _, H, _, D = self.store.slot_shape
        (full,), run = self.store.working([(L, 2, H, capacity, D)])
        self._fill(full, prefix_ids, 0, group, carry)
        kv = full[:, :, :, : self.blocks.num_tokens(prefix_ids)]
        if not self.keep:
            runs.append(run)
            return kv, None
        self.kept = KeptPrefix(tuple(prefix_ids), full, run, users=1)
        return kv, self.kept

    def _fill(self, full: torch.Tensor, prefix_ids: list[int], start: int, group: Group, carry: Placed) -> None:
        """Copy blocks `prefix_ids[start:]` into their columns of `full` (d2d those the previous group
        placed); bytes are split among the members."""
        column = self.blocks.num_tokens(prefix_ids[:start])
        copier = BlockCopier(self.store, self.blocks, False, {}, carry)
        copier.copy(full, column, prefix_ids[start:], group.candidates)
