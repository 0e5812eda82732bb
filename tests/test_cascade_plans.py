"""Plans sized by what the executor really allocates (issue 9): a group's estimate is the slots its cascade
load takes from the pool, lbs makes fewer groups and moves fewer bytes for it, in_device accepts budgets the
previous estimate refused, and the whole-search bound stays above every real in_device peak."""

from __future__ import annotations

import pytest

from benchmarks.cascade_plans import previous_estimate, previous_group_bytes
from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.errors import KVBudgetTooSmall
from engine.kv import in_device
from engine.kv.blocks import Tier
from engine.kv.cache import KVCache
from engine.kv.groups import GroupExecutor
from engine.kv.policy import Work, common_prefix, work_of
from engine.kv.sizing import search_kv_bytes
from engine.kv.working import group_shape, group_working_bytes
from engine.search import SYSTEM_PROMPT
from tests.test_equivalence import QUESTION, assert_same_run, footprint_budget, search_trace

SEARCHES = [
    SearchConfig(beams=2, width=3, step_tokens=6, max_steps=3, step_delimiter=None, seed=7),
    SearchConfig(beams=3, width=2, step_tokens=9, max_steps=3, step_delimiter=" ", seed=3),
    SearchConfig(beams=1, width=4, step_tokens=20, max_steps=2, step_delimiter="c", seed=3),
]


def search_id(search: SearchConfig) -> str:
    return f"{search.beams}x{search.width}-k{search.step_tokens}"


class LoadSpy:
    """Each planned group's estimate (taken at plan time, from `Work` alone) and the slots each load took."""

    def __init__(self, monkeypatch) -> None:
        self.estimates: list[dict[tuple[int, ...], int]] = []  # per step: group -> estimated bytes
        self.loads: list[tuple[tuple[int, ...], int]] = []  # (group, bytes the pool handed out)
        plan, load = KVCache.plan, GroupExecutor._load
        spy = self

        def planning(kv, candidates):
            step = plan(kv, candidates)
            works = {c: work_of(kv.live[c], kv.blocks) for c in candidates}
            groups = [[works[c] for c in g.candidates] for g in step.groups]
            spy.estimates.append({tuple(w.id for w in g): spy.estimate(kv, g, groups) for g in groups})
            return step

        def loading(executor, group, live, *carry, **strict):
            taken, working = [], executor.store.working

            def counting(shapes):
                tensors, run = working(shapes)
                taken.append(run.length)
                return tensors, run

            executor.store.working = counting
            try:
                batch = load(executor, group, live, *carry, **strict)
            finally:
                del executor.store.working
            spy.loads.append((group.candidates, sum(taken) * executor.store.block_bytes))
            return batch

        monkeypatch.setattr(KVCache, "plan", planning)
        monkeypatch.setattr(GroupExecutor, "_load", loading)

    @staticmethod
    def estimate(kv: KVCache, members: list[Work], groups: list[list[Work]]) -> int:
        """The group's working bytes as the executor loads it; with prefix order a staged prefix is sized
        for the step's longest shared prefix (engine/kv/kept_prefix.py `PrefixKeeper.load`)."""
        store, executor, block = kv.store, kv.policy.executor, kv.store.blocks.block_size
        in_place = store.contiguous(common_prefix([m.table for m in members]), Tier.DEVICE) is not None
        floor = max(group_shape(g, block, cascade=True).prefix for g in groups) if executor.prefixes.keep else 0
        return group_working_bytes(members, kv.search.step_tokens, store.token_bytes, block,
                                   cascade=executor.cascade, prefix_in_place=in_place, prefix_floor=floor)  # fmt: skip

    def planned(self) -> dict[tuple[int, ...], int]:
        return {group: nbytes for step in self.estimates for group, nbytes in step.items()}


def finished(events) -> list:
    assert events[-1].type == "run_finished", events[-1]
    assert not [e for e in events if isinstance(e, ev.GroupRetried)], "a plan that fits is never retried"
    return events


@pytest.mark.parametrize("speculative", [False, True], ids=["plain", "speculative"])
@pytest.mark.parametrize("search", SEARCHES, ids=search_id)
@pytest.mark.parametrize("policy", ["in_device", "lbs"])
def test_every_groups_estimate_is_the_slots_its_load_takes(tiny, monkeypatch, policy, search, speculative):
    """Prefix staged or read in place, the parent level and the arena: the estimate from `Work` alone equals
    what the pool handed out (both whole slots), for every group of every step."""
    spy = LoadSpy(monkeypatch)
    budget = footprint_budget(tiny, search, 1.2) if policy == "lbs" else None
    cache = CacheConfig(policy=policy, kv_budget_bytes=budget, speculative=speculative, prefix_order=False)
    finished(search_trace(tiny, search, cache)[0])
    planned = spy.planned()
    assert len(spy.loads) == sum(len(step) for step in spy.estimates) >= search.max_steps
    assert all(planned[group] == taken for group, taken in spy.loads), (spy.loads, planned)
    if policy == "lbs":
        assert max(len(step) for step in spy.estimates) >= 2, "the budget should make several groups"


def test_a_kept_prefix_is_counted_at_the_longest_and_never_exceeded(tiny, monkeypatch):
    """With prefix order the staged prefix stays for the next group, sized for the step's longest:
    a group that reads the kept prefix takes less than its estimate, one that stages it exactly that."""
    search = SEARCHES[0]
    spy = LoadSpy(monkeypatch)
    cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny, search, 1.2), prefix_order=True)
    finished(search_trace(tiny, search, cache)[0])
    assert max(len(step) for step in spy.estimates) >= 2
    planned = spy.planned()
    assert all(taken <= planned[group] for group, taken in spy.loads)
    assert any(taken < planned[group] for group, taken in spy.loads)  # a kept prefix read again


def test_lbs_at_a_tight_budget_makes_fewer_groups_and_moves_fewer_bytes_with_the_same_tokens(tiny):
    """The previous estimate counted every row at the longest member's length; per family, groups are
    larger, so there are fewer of them and shared histories cross PCIe fewer times."""
    search = SEARCHES[0]
    cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny, search, 1.2), prefix_order=False)
    with previous_estimate():
        before = search_trace(tiny, search, cache)
    after = search_trace(tiny, search, cache)
    reference = search_trace(tiny, search, CacheConfig(policy="in_device"))
    assert_same_run(reference, after)
    assert_same_run(reference, before)
    fewer = [a.groups <= b.groups for b, a in zip(transfers(before), transfers(after), strict=True)]
    assert all(fewer) and sum(e.groups for e in transfers(after)) < sum(e.groups for e in transfers(before))
    assert transfers(after)[-1].h2d_bytes < transfers(before)[-1].h2d_bytes


def transfers(run) -> list[ev.TransferStats]:
    return [e for e in finished(run[0]) if isinstance(e, ev.TransferStats)]


def test_the_same_work_makes_fewer_groups_by_family_than_by_longest_row():
    """Planned on the same `Work`: 3 parents x 4 children, each parent 40 tokens past a 48-token prompt."""
    from engine.kv.lbs import Switches, plan_lbs

    k, token_bytes, block = 8, 10, 16
    prompt = (0, 1, 2)
    work = [Work(10 * p + c, (*prompt, 100 + 10 * p, 101 + 10 * p, 102 + 10 * p), 88, source=p)
            for p in range(3) for c in range(4)]  # fmt: skip
    budget = 4 * (88 + k) * token_bytes
    with previous_estimate():
        before = plan_lbs(work, budget, k, token_bytes, Switches(), 0, block)
    after = plan_lbs(work, budget, k, token_bytes, Switches(), 0, block)
    assert len(after.groups) < len(before.groups)
    by_id = {w.id: w for w in work}
    for group in after.groups:
        members = [by_id[c] for c in group.candidates]
        assert group_working_bytes(members, k, token_bytes, block, cascade=True) <= budget
        shape = group_shape(members, block, cascade=True)
        assert shape.width == 0 and shape.height == 40  # children read their parent's history from one copy


def test_a_groups_parts_follow_the_executors_family_rule():
    """Blocks are full but for a table's last: a prefix of two blocks (32 tokens), family 10 sharing a partial
    block (8 tokens), family 11 sharing one full block, one of its rows with a copied tail of its own."""
    a1, a2 = Work(1, (0, 1, 5), 40, source=10), Work(2, (0, 1, 5), 40, source=10)
    b1, b2 = Work(3, (0, 1, 8, 9), 60, source=11), Work(4, (0, 1, 8, 12), 58, source=11)
    shape = group_shape([a1, a2, b1, b2], 16, cascade=True)
    assert (shape.prefix, shape.families, shape.height, shape.rows, shape.width) == (32, 2, 16, 4, 12)
    assert shape.slots(4, 16) == 2 + 6  # the prefix's run, then 4 x (12 + 4) + 2 x 16 = 96 tokens
    assert group_shape([a1, a2, b1, b2], 16, cascade=True, prefix_in_place=True).slots(4, 16) == 6
    assert group_shape([a1, a2, b1, b2], 16, cascade=False).slots(4, 16) == 4 * (60 + 4) // 16
    split = group_shape([a1, Work(5, (0, 1, 6), 36, source=10)], 16, cascade=True)  # siblings part at the prefix
    assert (split.families, split.height, split.width) == (0, 0, 8)  # no parent level: each row holds its own
    alone = group_shape([b2], 16, cascade=True)  # one row: its whole table is the prefix it stages
    assert (alone.prefix, alone.width, alone.slots(4, 16)) == (58, 0, 4 + 1)


def test_in_device_accepts_a_budget_the_previous_estimate_refused_and_runs_within_it(tiny, monkeypatch):
    search = SEARCHES[0]
    needs: list[tuple[int, int]] = []  # per step: (need now, need by the previous estimate)
    plan = in_device.plan_in_device

    def recording(work, resident, budget, k, token_bytes, block_size, tails=1, **cascade):
        try:
            plan(work, resident, 0, k, token_bytes, block_size, tails, **cascade)
        except KVBudgetTooSmall as error:
            now = error.needed_bytes
            working = group_working_bytes(work, k, token_bytes, block_size, **cascade)
            needs.append((now, now - working + previous_group_bytes(work, k, token_bytes)))
        return plan(work, resident, budget, k, token_bytes, block_size, tails, **cascade)

    monkeypatch.setattr(in_device, "plan_in_device", recording)
    reference = search_trace(tiny, search, CacheConfig(policy="in_device"))
    now, previous = max(now for now, _ in needs), max(previous for _, previous in needs)
    block = CacheConfig().block_size * tiny.kv_shape.token_bytes()
    budget = -(-now // block) * block  # the pool holds whole slots
    assert budget < previous, "the previous estimate refused this budget"
    run = search_trace(tiny, search, CacheConfig(policy="in_device", kv_budget_bytes=budget))
    assert_same_run(reference, run)
    peaks = [e.peak_device_bytes for e in finished(run[0]) if isinstance(e, ev.MemorySnapshot)]
    assert peaks and max(peaks) <= budget


BOUND_SEARCHES = [*SEARCHES, SearchConfig(beams=4, width=4, step_tokens=4, max_steps=4, step_delimiter=None, seed=2),
                  SearchConfig(beams=2, width=2, step_tokens=12, max_steps=4, step_delimiter="\n", seed=5)]  # fmt: skip


@pytest.mark.parametrize("speculative", [False, True], ids=["plain", "speculative"])
@pytest.mark.parametrize("search", BOUND_SEARCHES, ids=search_id)
def test_the_whole_search_bound_holds_every_in_device_peak_and_is_lower_per_family(tiny, search, speculative):
    """in_device's pool is sized to the bound (no budget given, emulated): every step fits without a retry,
    the pool's peak stays under it, and it is lower than every row holding its whole history (more search
    shapes and methods: tests/test_whole_bound.py)."""
    cache = CacheConfig(policy="in_device", speculative=speculative)
    prompt = len(tiny.encode_chat(QUESTION, system=SYSTEM_PROMPT))
    token_bytes = tiny.kv_shape.token_bytes()
    bound = search_kv_bytes(prompt, search, cache, token_bytes, cascade=True)
    events = finished(search_trace(tiny, search, cache)[0])
    snapshots = [e for e in events if isinstance(e, ev.MemorySnapshot)]
    assert snapshots and all(e.budget_bytes == bound for e in snapshots)
    assert max(e.peak_device_bytes for e in snapshots) <= bound
    previous = search_kv_bytes(prompt, search, cache, token_bytes, cascade=False)
    assert bound < previous
