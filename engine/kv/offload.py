"""Moving every block that rests on the device to the host: how `auto` goes on from in_device to lbs.

`auto` keeps the search on the device when the whole of it fits the budget. On CUDA the budget is
re-read every step from free device memory, and another program (a game) may take memory mid-run;
when in_device's next step no longer fits, the blocks at rest cross to the host once and the run
goes on with lbs (engine/kv/cache.py) instead of failing. Copies go run by run: full blocks in
consecutive device slots, held by the same candidates, cross in one copy into consecutive host
slots, and their bytes go to those candidates.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine.kv.arena import split_runs
from engine.kv.blocks import BlockManager, Tier
from engine.kv.store import KVStore


def move_to_host(store: KVStore, blocks: BlockManager, tables: Iterable[tuple[int, Sequence[int]]]) -> int:
    """Copy the device-resident blocks of `tables` ((owner, block table) pairs) to the host and free their
    device slots; returns the bytes moved (each block's tokens, exactly)."""
    users: dict[int, list[int]] = {}
    for owner, table in tables:
        for block_id in table:
            if store.holds(block_id, Tier.DEVICE) and owner not in users.setdefault(block_id, []):
                users[block_id].append(owner)
    runs = split_runs(list(users), lambda previous, block_id: _continues(store, blocks, previous, block_id, users))
    moved = 0
    try:
        for run in runs:
            tokens = blocks.num_tokens(run)
            if not store.holds(run[0], Tier.HOST):
                store.place(run, Tier.HOST)
                store.copy(store.span(run[0], Tier.HOST, tokens), store.span(run[0], Tier.DEVICE, tokens), "d2h",
                           users[run[0]])  # fmt: skip
                moved += tokens * store.token_bytes
            store.evict(run, Tier.DEVICE)
    finally:  # on CUDA the copies are asynchronous: the host blocks hold their KV from here on, also when a later
        store.sync()  # run's copy failed (the failed run then keeps its prompt's blocks from the host)
    return moved


def _continues(store: KVStore, blocks: BlockManager, previous: int, block_id: int, users) -> bool:
    """Whether one copy goes on from `previous` to `block_id`: not after a partly filled block, nor to a slot that
    does not follow in the same device run, nor at a change of users or of whether the block is on the host
    too (then it only drops its device copy)."""
    return (
        blocks.blocks[previous].num_tokens == blocks.block_size
        and store.follows(block_id, previous, Tier.DEVICE)
        and users[previous] == users[block_id]
        and store.holds(previous, Tier.HOST) == store.holds(block_id, Tier.HOST)
    )
