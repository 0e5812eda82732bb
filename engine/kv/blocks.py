"""Block bookkeeping: ids, refcounts, fork with copy-on-write, prefix hashes, placement. No tensors.

A candidate's KV is a *block table*: a list of block ids, each block holding up to
`block_size` consecutive tokens. Children of a beam share its blocks (refcount > 1);
appending to a shared, partly filled last block first copies it (copy-on-write), so
siblings never see each other's tokens. A full block gets a token-exact chain hash of
every token up to its end, which finds identical prefixes across tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum


class Tier(Enum):
    DEVICE = "device"
    HOST = "host"


@dataclass
class Block:
    id: int
    ref_count: int = 0
    token_ids: list[int] = field(default_factory=list)
    hash: int | None = None  # set once full: hash of (previous block's hash, this block's tokens)
    on_device: bool = False
    on_host: bool = False

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def placement(self) -> str:
        if self.on_device and self.on_host:
            return "both"
        return "device" if self.on_device else "host" if self.on_host else "none"


@dataclass(frozen=True)
class Write:
    """Tokens [start, start + count) of the appended run go to slots [offset, offset + count) of `block`."""

    block: int
    offset: int
    start: int
    count: int


@dataclass(frozen=True)
class CopyOnWrite:
    """Copy the first `tokens` slots of `source` into the fresh block `target` before writing."""

    source: int
    target: int
    tokens: int


@dataclass(frozen=True)
class AppendPlan:
    table: list[int]  # the new block table
    copies: list[CopyOnWrite]
    writes: list[Write]
    new_blocks: list[int]


class BlockManager:
    """Owns every block's refcount, tokens, hash and placement; the KV store owns the tensors."""

    def __init__(self, block_size: int) -> None:
        if block_size < 1:
            raise ValueError(f"block size must be at least 1 token (got {block_size}).")
        self.block_size = block_size
        self.blocks: dict[int, Block] = {}
        self._next_id = 0
        self._by_hash: dict[int, int] = {}

    # -- allocation ---------------------------------------------------------------------------
    def _new_block(self, home: Tier) -> Block:
        block = Block(self._next_id, ref_count=1, on_device=home is Tier.DEVICE, on_host=home is Tier.HOST)
        self.blocks[block.id] = block
        self._next_id += 1
        return block

    def allocate(self, token_ids: Sequence[int], home: Tier) -> AppendPlan:
        """A fresh table for `token_ids` (a prompt)."""
        return self.append([], token_ids, home)

    def fork(self, table: Sequence[int]) -> list[int]:
        """A child's table: the same blocks, each referenced once more."""
        for block_id in table:
            self.blocks[block_id].ref_count += 1
        return list(table)

    def append(self, table: Sequence[int], token_ids: Sequence[int], home: Tier) -> AppendPlan:
        """Plan appending `token_ids` to `table`: copy-on-write of a shared partial tail, then new blocks."""
        table, copies, writes, new_blocks = list(table), [], [], []
        start = 0
        if table and token_ids:
            tail = self.blocks[table[-1]]
            room = self.block_size - tail.num_tokens
            if room > 0:
                if tail.ref_count > 1:
                    fresh = self._new_block(home)
                    fresh.token_ids = list(tail.token_ids)
                    copies.append(CopyOnWrite(tail.id, fresh.id, tail.num_tokens))
                    new_blocks.append(fresh.id)
                    self._release(tail)
                    table[-1], tail = fresh.id, fresh
                count = min(room, len(token_ids))
                writes.append(Write(tail.id, tail.num_tokens, 0, count))
                tail.token_ids.extend(token_ids[:count])
                self._seal(table, len(table) - 1)
                start = count
        while start < len(token_ids):
            block = self._new_block(home)
            count = min(self.block_size, len(token_ids) - start)
            block.token_ids = list(token_ids[start : start + count])
            writes.append(Write(block.id, 0, start, count))
            new_blocks.append(block.id)
            table.append(block.id)
            self._seal(table, len(table) - 1)
            start += count
        return AppendPlan(table, copies, writes, new_blocks)

    def _seal(self, table: list[int], index: int) -> None:
        block = self.blocks[table[index]]
        if block.num_tokens == self.block_size and block.hash is None:
            previous = self.blocks[table[index - 1]].hash if index > 0 else None
            block.hash = hash((previous, tuple(block.token_ids)))
            self._by_hash.setdefault(block.hash, block.id)

    # -- release ------------------------------------------------------------------------------
    def free(self, table: Iterable[int]) -> list[int]:
        """Drop one reference to each block of `table`; returns the ids whose last reference went."""
        freed = []
        for block_id in table:
            block = self.blocks.get(block_id)
            if block is None:
                raise RuntimeError(f"block {block_id} released more often than referenced")
            if self._release(block):
                freed.append(block_id)
        return freed

    def _release(self, block: Block) -> bool:
        if block.ref_count <= 0:
            raise RuntimeError(f"block {block.id} released more often than referenced")
        block.ref_count -= 1
        if block.ref_count:
            return False
        del self.blocks[block.id]
        if block.hash is not None and self._by_hash.get(block.hash) == block.id:
            del self._by_hash[block.hash]
        return True

    # -- queries ------------------------------------------------------------------------------
    def cached_prefix(self, token_ids: Sequence[int]) -> list[int]:
        """Ids of live full blocks that hold exactly the leading tokens of `token_ids`."""
        found, previous = [], None
        for start in range(0, len(token_ids) - self.block_size + 1, self.block_size):
            key = hash((previous, tuple(token_ids[start : start + self.block_size])))
            block_id = self._by_hash.get(key)
            if block_id is None or self.blocks[block_id].token_ids != list(token_ids[start : start + self.block_size]):
                break
            found.append(block_id)
            previous = key
        return found

    def tokens_of(self, table: Sequence[int]) -> list[int]:
        return [t for block_id in table for t in self.blocks[block_id].token_ids]

    def num_tokens(self, table: Sequence[int]) -> int:
        return sum(self.blocks[block_id].num_tokens for block_id in table)

    def set_placement(self, block_id: int, *, on_device: bool | None = None, on_host: bool | None = None) -> None:
        block = self.blocks[block_id]
        if on_device is not None:
            block.on_device = on_device
        if on_host is not None:
            block.on_host = on_host
