"""The scheduler's plans through their public functions: `plan_in_device` and `plan_lbs` (Algorithm 1, balanced groups).

Only public names are used, so the policies' internals can change under these tests.
"""

from __future__ import annotations

import math

import pytest

from engine.errors import KVBudgetTooSmall
from engine.kv.in_device import plan_in_device
from engine.kv.lbs import Switches, _prefix_order, footprint, group_bytes, plan_lbs
from engine.kv.policy import Work

K, TOKEN_BYTES, BLOCK = 4, 100, 4  # step tokens, bytes of one token's KV (all layers), block size


def work(n: int, tokens: int = 8, shared: tuple[int, ...] = (0,)) -> list[Work]:
    """`n` candidates of `tokens` tokens sharing the prefix blocks `shared`, each with one block of its own."""
    return [Work(i, (*shared, 100 + i), tokens) for i in range(n)]


def ids(plan) -> list[tuple[int, ...]]:
    return [g.candidates for g in plan.groups]


# -- in_device ------------------------------------------------------------------------------


def test_in_device_is_one_group_of_every_candidate_in_order():
    plan = plan_in_device(work(5), 0, 10**9, K, TOKEN_BYTES, BLOCK)
    assert plan.policy == "in_device" and ids(plan) == [(0, 1, 2, 3, 4)]
    assert plan.groups[0].prefetched == ()


def test_in_device_names_the_smallest_budget_that_works():
    candidates = work(6)
    with pytest.raises(KVBudgetTooSmall) as too_small:
        plan_in_device(candidates, 5000, 1000, K, TOKEN_BYTES, BLOCK)
    need = too_small.value.needed_bytes
    assert need > 1000 and too_small.value.budget_bytes == 1000
    assert ids(plan_in_device(candidates, 5000, need, K, TOKEN_BYTES, BLOCK)) == [tuple(range(6))]
    with pytest.raises(KVBudgetTooSmall):
        plan_in_device(candidates, 5000, need - 1, K, TOKEN_BYTES, BLOCK)


def test_in_device_counts_the_blocks_already_resident():
    candidates = work(3)
    with pytest.raises(KVBudgetTooSmall) as empty:
        plan_in_device(candidates, 0, 1, K, TOKEN_BYTES, BLOCK)
    with pytest.raises(KVBudgetTooSmall) as full:
        plan_in_device(candidates, 7777, 1, K, TOKEN_BYTES, BLOCK)
    assert full.value.needed_bytes - empty.value.needed_bytes == 7777


# -- lbs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("switches", [Switches(), Switches(inter_beam=False), Switches(balanced_prefetch=False),
                                      Switches(inter_beam=False, balanced_prefetch=False)])
@pytest.mark.parametrize("n, per_group", [(1, 1), (7, 3), (8, 4), (16, 5), (9, 9)])
def test_lbs_groups_partition_the_candidates_and_each_fits_the_budget(switches, n, per_group):
    candidates = work(n, tokens=12)
    largest = footprint(candidates[0], K, TOKEN_BYTES)
    budget = per_group * largest + largest // 2
    plan = plan_lbs(candidates, budget, K, TOKEN_BYTES, switches)
    assert plan.policy == "lbs"
    members = sorted(c for group in ids(plan) for c in group)
    assert members == list(range(n))  # every candidate once
    by_id = {w.id: w for w in candidates}
    assert all(group_bytes([by_id[c] for c in group], K, TOKEN_BYTES) <= budget for group in ids(plan))
    assert len(plan.groups) == math.ceil(n / per_group)  # as few rounds as the budget allows


def test_balanced_groups_take_the_fewest_rounds_in_even_sizes_and_leave_prefetching_to_the_executor():
    """The plan marked the next group's candidates that fit beside the largest as prefetched, but the executor
    replaces `prefetched` with what it really loaded ahead (engine/kv/groups.py `_as_loaded`): no plan marks it."""
    candidates = work(9)
    largest = footprint(candidates[0], K, TOKEN_BYTES)
    plan = plan_lbs(candidates, 8 * largest, K, TOKEN_BYTES, Switches())
    assert [len(g.candidates) for g in plan.groups] == [5, 4]  # ceil(9 / 8) = 2 rounds of ceil(9 / 2), not 8 + 1
    assert all(g.prefetched == () for g in plan.groups)
    tight = plan_lbs(work(6), 3 * largest, K, TOKEN_BYTES, Switches())
    assert [len(g.candidates) for g in tight.groups] == [3, 3]


def test_without_balancing_groups_fill_greedily_and_prefetch_nothing():
    candidates = work(10)
    largest = footprint(candidates[0], K, TOKEN_BYTES)
    plan = plan_lbs(candidates[:9], 8 * largest, K, TOKEN_BYTES, Switches(balanced_prefetch=False))
    assert [len(g.candidates) for g in plan.groups] == [8, 1]
    assert all(g.prefetched == () for g in plan.groups)


def test_inter_beam_groups_candidates_that_share_blocks():
    # Two families arriving interleaved: a0, b0, a1, b1; each family shares its prefix blocks.
    a = [Work(0, (1, 2, 10), 8), Work(2, (1, 2, 12), 8)]
    b = [Work(1, (3, 4, 11), 8), Work(3, (3, 4, 13), 8)]
    candidates = [a[0], b[0], a[1], b[1]]
    budget = 2 * footprint(a[0], K, TOKEN_BYTES)
    shared = plan_lbs(candidates, budget, K, TOKEN_BYTES, Switches(inter_beam=True))
    in_order = plan_lbs(candidates, budget, K, TOKEN_BYTES, Switches(inter_beam=False))
    assert ids(shared) == [(0, 2), (1, 3)]  # Algorithm 1: the most shared blocks join the seed
    assert ids(in_order) == [(0, 1), (2, 3)]


def test_lbs_ties_go_to_the_earlier_candidate_so_plans_repeat():
    candidates = work(6)  # all share one block: every overlap ties
    largest = footprint(candidates[0], K, TOKEN_BYTES)
    plans = {tuple(ids(plan_lbs(candidates, 2 * largest, K, TOKEN_BYTES, Switches()))) for _ in range(3)}
    assert plans == {((0, 1), (2, 3), (4, 5))}


def test_lbs_with_no_candidates_plans_nothing_and_a_too_small_budget_names_one_candidate():
    assert plan_lbs([], 1, K, TOKEN_BYTES, Switches()).groups == ()
    candidates = [Work(0, (1,), 4), Work(1, (2,), 40)]
    need = footprint(candidates[1], K, TOKEN_BYTES)
    with pytest.raises(KVBudgetTooSmall) as too_small:
        plan_lbs(candidates, need - 1, K, TOKEN_BYTES, Switches())
    assert too_small.value.needed_bytes == need and "one candidate" in str(too_small.value)
    assert ids(plan_lbs(candidates, need, K, TOKEN_BYTES, Switches())) == [(0,), (1,)]


def test_a_group_is_padded_to_its_longest_member():
    short, long = Work(0, (1,), 4), Work(1, (2,), 20)
    assert group_bytes([short, long], K, TOKEN_BYTES) == 2 * footprint(long, K, TOKEN_BYTES)
    assert group_bytes([], K, TOKEN_BYTES) == 0


def test_prefix_order_takes_the_group_sharing_most_with_the_last_next_and_ties_to_the_earlier():
    """FlashTTS's T(k+1) = argmax shared blocks with T(k), on the groups themselves (no budget involved)."""
    a = [Work(1, (0, 1, 2), 24)]
    b = [Work(2, (7, 8), 16)]  # shares nothing with a
    c = [Work(3, (0, 1, 5), 24), Work(4, (0, 6), 16)]  # shares blocks 0 and 1 with a
    d = [Work(5, (0, 1, 2, 9), 32)]  # shares 0, 1 and 2 with a; 0 and 1 with c
    e = [Work(6, (7, 8, 10), 24)]  # shares 7 and 8 with b
    order = lambda groups: [[w.id for w in g] for g in _prefix_order(groups)]  # noqa: E731
    assert order([a, b, c, d, e]) == [[1], [5], [3, 4], [2], [6]]
    assert order([a, b, e]) == [[1], [2], [6]]  # b and e share nothing with a: the earlier (b), then e
    assert order([a, e, b]) == [[1], [6], [2]]
    assert order([b, a]) == [[2], [1]] and order([]) == []  # the first group stays first
