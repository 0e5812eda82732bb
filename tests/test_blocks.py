"""Block manager invariants: refcounts, fork sharing, copy-on-write, exact frees, prefix hashing."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv.blocks import BlockManager, Tier


def live_refs(tables: dict[int, list[int]]) -> Counter:
    return Counter(b for t in tables.values() for b in t)


def check_consistent(manager: BlockManager, tables: dict[int, list[int]]) -> None:
    """Every live block is referenced exactly as often as the tables say, and no other block exists."""
    refs = live_refs(tables)
    assert set(manager.blocks) == set(refs)
    for block_id, block in manager.blocks.items():
        assert block.ref_count == refs[block_id] > 0


def test_allocate_splits_into_blocks_and_hashes_full_ones():
    m = BlockManager(block_size=4)
    plan = m.allocate(list(range(10)), Tier.HOST)
    assert [m.blocks[b].num_tokens for b in plan.table] == [4, 4, 2]
    assert [m.blocks[b].hash is not None for b in plan.table] == [True, True, False]
    assert m.tokens_of(plan.table) == list(range(10))
    assert all(m.blocks[b].placement == "host" for b in plan.table)


def test_fork_shares_and_copy_on_write_keeps_siblings_apart():
    m = BlockManager(block_size=4)
    root = m.allocate([1, 2, 3, 4, 5, 6], Tier.HOST).table
    a, b = m.fork(root), m.fork(root)
    assert m.blocks[root[-1]].ref_count == 3
    plan_a = m.append(a, [7], Tier.HOST)
    assert len(plan_a.copies) == 1 and plan_a.copies[0].source == root[-1] and plan_a.copies[0].tokens == 2
    assert plan_a.table[0] == root[0] and plan_a.table[-1] != root[-1]
    m.free(root)
    plan_b = m.append(b, [8, 9], Tier.HOST)
    assert plan_b.copies == [] and plan_b.table[-1] == root[-1]  # last holder writes in place
    assert m.tokens_of(plan_a.table) == [1, 2, 3, 4, 5, 6, 7]
    assert m.tokens_of(plan_b.table) == [1, 2, 3, 4, 5, 6, 8, 9]


def test_free_returns_exactly_the_blocks_no_live_table_uses():
    m = BlockManager(block_size=2)
    root = m.allocate([1, 2, 3, 4], Tier.HOST).table
    kept = m.append(m.fork(root), [5, 6], Tier.HOST).table
    pruned = m.append(m.fork(root), [7, 8], Tier.HOST).table
    m.free(root)
    freed = m.free(pruned)
    assert set(freed) == set(pruned) - set(kept)
    check_consistent(m, {0: kept})


def test_refcount_never_goes_negative():
    m = BlockManager(block_size=2)
    table = m.allocate([1, 2], Tier.HOST).table
    m.free(table)
    with pytest.raises(RuntimeError, match="released more often"):
        m.free(table)


def test_prefix_hashing_finds_identical_prefixes_token_exactly():
    m = BlockManager(block_size=3)
    m.allocate([1, 2, 3, 4, 5, 6, 7], Tier.HOST)
    assert len(m.cached_prefix([1, 2, 3, 4, 5, 6, 9])) == 2
    assert len(m.cached_prefix([1, 2, 3, 4, 5, 0])) == 1
    assert m.cached_prefix([9, 2, 3]) == []


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["fork", "append", "free"]), st.integers(0, 50), st.integers(1, 9)), max_size=60
    ),
    st.integers(1, 5),
)
def test_random_beam_trees_keep_refcounts_consistent(ops, block_size):
    m = BlockManager(block_size)
    tables = {0: m.allocate(list(range(7)), Tier.HOST).table}
    contents = {0: list(range(7))}
    next_id = 1
    for op, pick, n in ops:
        if not tables:
            break
        key = sorted(tables)[pick % len(tables)]
        if op == "fork":
            tables[next_id], contents[next_id] = m.fork(tables[key]), list(contents[key])
            next_id += 1
        elif op == "append":
            new = [100 + pick + i for i in range(n)]
            tables[key] = m.append(tables[key], new, Tier.HOST).table
            contents[key] += new
        else:
            m.free(tables.pop(key))
            contents.pop(key)
        check_consistent(m, tables)
        for k, t in tables.items():
            assert m.tokens_of(t) == contents[k]  # no sibling ever sees another's tokens


@settings(max_examples=60, deadline=None)
@given(block_size=st.sampled_from([4, 16]), prompt=st.integers(1, 40), step=st.integers(1, 40))
def test_a_forked_rows_step_takes_no_more_blocks_than_the_plans_count(block_size, prompt, step):
    """A child forked from its parent and given a step's tokens opens at most `growth_tokens` worth of
    blocks (its fresh blocks and the copied-on-write shared tail), whatever the step's length against the
    block size: the in_device plan and the whole-search bound count that growth."""
    from engine.kv.policy import growth_tokens

    m = BlockManager(block_size=block_size)
    parent = m.allocate(list(range(prompt)), Tier.DEVICE).table
    before = len(m.blocks)
    child = m.append(m.fork(parent), list(range(100, 100 + step)), Tier.DEVICE).table
    opened = len(m.blocks) - before
    assert opened * block_size <= growth_tokens(step, block_size, tails=1)
    assert len(child) >= len(parent)
