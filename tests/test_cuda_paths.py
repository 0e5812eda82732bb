"""The KV engine's CUDA-only branches (loads and write-back on the copy stream, the events that order and
time them, lbs's prefetch of the next group, pinned host buffers) run on the CPU through a fake of CUDA's
streams (tests/fake_cuda.py), which runs copy-stream copies as late as CUDA may and raises on a race.
Each policy gives the emulated run's tokens, logits and bytes."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.kv import layerwise
from engine.kv import store as store_module
from engine.kv.groups import GroupExecutor
from engine.kv.lbs import LbsPolicy
from engine.kv.policy import Group, StepPlan
from engine.kv.pool import PoolExhausted
from tests.fake_cuda import FakeCuda, Fakes, HazardError
from tests.test_equivalence import SEARCH, SPECULATING, assert_same_run, footprint_budget, search_trace


@pytest.fixture
def fakes(monkeypatch, watch_kernels) -> Fakes:
    made = Fakes()
    monkeypatch.setattr(store_module, "streams_for", made.streams_for)
    return made


def emulated_and_cuda(fakes: Fakes, loaded, search: SearchConfig, cache: CacheConfig):
    """The search run on the emulated device, then through the CUDA branches (the fake)."""
    emulated = search_trace(loaded, search, cache)
    fakes.on = True
    try:
        return emulated, search_trace(loaded, search, cache)
    finally:
        fakes.on = False


def step_bytes(run) -> list[tuple[int, int, int]]:
    return [(e.step_h2d_bytes, e.step_d2h_bytes, e.step_d2d_bytes) for e in run[0] if isinstance(e, ev.TransferStats)]


def assert_bytes_as_emulated(cuda, emulated) -> None:
    """Each step's bytes are the emulated run's, but for blocks CUDA copied ahead into the room a group left
    (engine/kv/staging.py): they cross PCIe as before (or not at all, taken on from the group before) and are
    then copied on the device once more."""
    for (h2d, d2h, d2d), (h2d_e, d2h_e, d2d_e) in zip(step_bytes(cuda), step_bytes(emulated), strict=True):
        assert d2h == d2h_e and h2d <= h2d_e and d2d >= d2d_e + (h2d_e - h2d)


LENDING = replace(SPECULATING, beams=4, width=4, seed=1)  # M_i = 4..1 runs: rows done with their beam are lent
LOOKING_AHEAD = replace(SEARCH, lookahead=2)  # layer-wise saves the children's rows while their roll-outs run


def budget(loaded, search: SearchConfig, candidates: float | None) -> int | None:
    return None if candidates is None else footprint_budget(loaded, search, candidates)


LBS = {  # (search, candidates the budget holds, switches): every lbs switch, in groups of two or more
    "lbs": (SEARCH, 1.2, {}),  # inter-beam, balanced prefetch, prefix order
    "lbs-many-groups": (SEARCH, 1.1, {}),
    "lbs-no-prefix-order": (SEARCH, 1.2, {"prefix_order": False}),
    "lbs-no-prefetch": (SEARCH, 1.2, {"balanced_prefetch": False}),
    "lbs-no-sharing": (SEARCH, 3.2, {"inter_beam": False}),
    "lbs-inter-token-only": (SEARCH, 1.5, {"inter_beam": False, "balanced_prefetch": False, "prefix_order": False}),
    "lbs-speculative": (SPECULATING, 1.3, {"speculative": True}),
    "lbs-lent-rows": (LENDING, 3, {"speculative": True}),
}
OTHERS = {
    "in_device": (SEARCH, None, "in_device", {}),
    "in_device-speculative": (SPECULATING, None, "in_device", {"speculative": True}),
    "in_device-lent-rows": (LENDING, None, "in_device", {"speculative": True}),
    "layerwise-every-layer-streams": (SEARCH, 4.2, "layerwise", {}),
    "layerwise-some-resident": (SEARCH, 4.5, "layerwise", {"model": "tiny_qwen2"}),  # 6 layers, 2 resident
    "layerwise-lookahead": (LOOKING_AHEAD, 4.5, "layerwise", {"model": "tiny_qwen2"}),  # rows saved, brought back
    "headwise": (SEARCH, 0.5, "headwise", {}),
    "headwise-no-sharing": (SEARCH, 0.5, "headwise", {"inter_beam": False}),
    "headwise-head-groups": (SEARCH, 1.5, "headwise", {}),  # two KV heads a group: a load is a piece per head
}
CASES = {name: (search, n, "lbs", switches) for name, (search, n, switches) in LBS.items()} | OTHERS


@pytest.mark.parametrize("case", list(CASES))
def test_cuda_branches_give_the_emulated_tokens_logits_and_bytes(request, fakes, case):
    """Every copy across PCIe runs on a stream (late, as CUDA may run it), its host side pinned; compute
    waits for what it reads (else it would read stale KV and the logits would differ); the events time
    each copy and are read after they completed; the bytes of each step are the emulated run's."""
    search, candidates, policy, switches = CASES[case]
    switches = dict(switches)
    loaded = request.getfixturevalue(switches.pop("model", "tiny"))
    cache = CacheConfig(policy=policy, kv_budget_bytes=budget(loaded, search, candidates), **switches)
    emulated, cuda = emulated_and_cuda(fakes, loaded, search, cache)
    assert_same_run(emulated, cuda)
    assert_bytes_as_emulated(cuda, emulated)
    fake = fakes.made[-1]
    assert fake.copies["copy"] > 0 and fake.unpinned == []
    # a host run crosses in contiguous pieces (a range of a token-major run's tokens, a head of a head-major one)
    assert fake.staged == [], "no PCIe copy goes through PyTorch's pageable temporaries"
    assert not fake.copy_stream.queue and not fake.compute.queue, "the run ends with every copy done"
    pinned = fake.allocator  # torch's caching host allocator, modelled (tests/fake_pinned.py)
    assert pinned.peak == pinned.peak_in_use, "no freed pinned block is kept while the run needs more"
    stats = [e for e in cuda[0] if isinstance(e, ev.TransferStats)]
    assert all(not s.emulated and s.copy_seconds > 0 for s in stats), "copy time is read from the events"
    if policy == "lbs":
        assert max(s.groups for s in stats) >= 2
    if search is LENDING:  # a lent row's save and copies run on the compute stream, before the write-back reads them
        assert sum(s.speculative_lent_runs for s in stats) > 0


def spy_groups(monkeypatch, fakes: Fakes) -> list[tuple]:
    """Log each group's load (whether a prefetch made it), and for each decode whether what it reads
    was ready and whether a prefetched group's copies were still queued (loading while it computes)."""
    log, prefetching = [], []
    load, decode, prefetch = GroupExecutor._load, GroupExecutor._decode, GroupExecutor._prefetch

    def loading(executor, group, live, carry=None, strict=False, early=False):
        batch = load(executor, group, live, carry, strict, early)
        log.append(("load", group.candidates, bool(prefetching)))
        return batch

    def prefetched(executor, group, live, carry):
        prefetching.append(True)
        try:
            return prefetch(executor, group, live, carry)
        finally:
            prefetching.pop()

    def decoding(executor, batch, should_stop):
        fake = fakes.made[-1]
        prefix = batch.prefix
        tensors = [batch.arena, *(t for layer in (prefix.layers if prefix else ()) for t in layer)]
        if prefix is not None and prefix.parents is not None:
            tensors += [t for layer in prefix.parents.layers for t in layer]
        log.append(("decode", batch.group.candidates, all(fake.ready(t) for t in tensors),
                    bool(fake.copy_stream.queue)))  # fmt: skip
        return decode(executor, batch, should_stop)

    monkeypatch.setattr(GroupExecutor, "_load", loading)
    monkeypatch.setattr(GroupExecutor, "_prefetch", prefetched)
    monkeypatch.setattr(GroupExecutor, "_decode", decoding)
    return log


def one_candidate_groups(monkeypatch) -> None:
    """lbs plans a group of each candidate: two of them fit the pool at once, so the next one is prefetched.
    The planner's groups would not do: balanced groups are as many as greedy packing needs, each close to
    the budget, and the executor prefetches only a whole next group, so two of them never fit together."""
    plan = LbsPolicy.plan

    def singles(policy, work, budget):
        groups = plan(policy, work, budget).groups
        return StepPlan("lbs", tuple(Group((c,)) for g in groups for c in g.candidates))

    monkeypatch.setattr(LbsPolicy, "plan", singles)


@pytest.mark.parametrize("prefix_order", [False, True])
def test_lbs_loads_the_next_group_while_one_computes_and_decodes_only_what_it_waited_for(tiny, fakes, monkeypatch,
                                                                                         prefix_order):  # fmt: skip
    """With room for two groups the next group's load is issued before this group decodes and is still
    queued on the copy stream while it does; every group's KV is ready when it decodes; the tokens, logits
    and PCIe bytes are the emulated run's (which loads each group after the one before); the events name
    as prefetched exactly the groups a prefetch loaded."""
    one_candidate_groups(monkeypatch)
    cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny, SEARCH, 3.0), prefix_order=prefix_order)
    emulated = search_trace(tiny, SEARCH, cache)
    log = spy_groups(monkeypatch, fakes)
    fakes.on = True
    cuda = search_trace(tiny, SEARCH, cache)
    assert_same_run(emulated, cuda)
    assert [b[:2] for b in step_bytes(cuda)] == [b[:2] for b in step_bytes(emulated)], "H2D and D2H"
    decodes = [entry for entry in log if entry[0] == "decode"]
    assert decodes and all(ready for _, _, ready, _ in decodes)
    prefetched = [group for kind, group, during in (e for e in log if e[0] == "load") if during]
    assert len(prefetched) >= SEARCH.max_steps, "groups were loaded by a prefetch"
    for group in prefetched:
        at = log.index(("load", group, True))
        previous = log[at + 1]  # the group computing while this one loads
        assert previous[0] == "decode" and previous[1] != group and previous[3], "its copies were still queued"
        assert ("decode", group) in [entry[:2] for entry in log[at + 2 :]]
    scheduled = {e.candidates: e.prefetched for e in cuda[0] if isinstance(e, ev.GroupScheduled)}
    assert {g: g for g in prefetched} == {g: p for g, p in scheduled.items() if p}, "events name what was prefetched"


def test_a_speculative_fork_copies_its_rows_block_only_after_the_write_back_is_done(tiny, fakes):
    """lbs with speculation on CUDA: a row's new KV goes to its host block on the copy stream, then the fork
    that keeps its speculated tokens copies that block on write, on the host. Without waiting for the
    copy stream the host copies stale KV (the fake raises: the copy is still queued)."""
    cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny, SPECULATING, 1.3), speculative=True,
                        prefix_order=False)  # fmt: skip
    emulated, cuda = emulated_and_cuda(fakes, tiny, SPECULATING, cache)
    assert sum(e.speculated for e in cuda[0] if e.type == "candidate_text") > 0
    assert_same_run(emulated, cuda)


def test_a_failed_prefetch_keeps_the_kept_prefix_for_the_next_load(tiny, fakes, monkeypatch):
    """Prefix order keeps a group's staged prefix for the next group. A prefetch with no room for its own
    copy of it must leave it kept: then the next group, loaded after this one's compute, refills it in
    place (as on the emulated device) instead of staging the whole prefix over PCIe again."""
    failed = []
    prefetch = GroupExecutor._prefetch

    def noting(executor, group, live, carry):
        batch = prefetch(executor, group, live, carry)
        failed.append(batch is None)
        return batch

    monkeypatch.setattr(GroupExecutor, "_prefetch", noting)
    cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny, SEARCH, 1.2), prefix_order=True)
    emulated, cuda = emulated_and_cuda(fakes, tiny, SEARCH, cache)
    assert any(failed), "a prefetch found no room"
    assert step_bytes(cuda) == step_bytes(emulated)
    if all(failed):
        assert all(e.prefetched == () for e in cuda[0] if isinstance(e, ev.GroupScheduled))


def test_layerwise_rows_selected_on_the_host_are_read_after_their_copy_there(tiny_qwen2, fakes, monkeypatch):
    """The pool refuses a layer's new rows (tests/test_layerwise_faults.py): its old rows go to the host,
    asynchronously on CUDA, and the host selects the new rows from them, so it must wait for that copy."""
    buffer, refused = layerwise.LayerwisePolicy._buffer, []

    def refusing(policy, rows, on_device, like, spares, from_end=False):
        if on_device and policy not in refused and policy.rows[0] != 0 and policy.layers[4].kv is like:
            refused.append(policy)
            raise PoolExhausted("injected: no run that long")
        return buffer(policy, rows, on_device, like, spares, from_end)

    monkeypatch.setattr(layerwise.LayerwisePolicy, "_buffer", refusing)
    cache = CacheConfig(policy="layerwise", kv_budget_bytes=1 << 30)
    emulated, cuda = emulated_and_cuda(fakes, tiny_qwen2, SEARCH, cache)
    assert len(refused) == 2, "one refusal in each run"
    assert_same_run(emulated, cuda)
    assert step_bytes(cuda) == step_bytes(emulated)


def test_the_kernel_watch_catches_compute_touching_memory_a_queued_copy_uses(watch_kernels):
    """The fake's kernel watch (`watch_kernels`, on in every test that drives the engine through the fake): a torch
    call on the compute stream that reads what a queued copy-stream copy writes, or writes what one reads, is a
    race; the same call after compute waited for the copy's event, or on the copy stream itself, is not."""
    fake = FakeCuda()
    host, device, spare = fake.empty_host((4,), torch.float32).fill_(1.0), torch.zeros(4), torch.zeros(4)
    with fake.stream(fake.copy_stream):
        fake.copy(device, host, "h2d")  # a load
        fake.copy(host, spare, "d2h")  # a write-back reading `spare`
        device.add(0)  # queued behind both on the copy stream: no race
        loaded = fake.event()
        loaded.record()
    with pytest.raises(HazardError, match=r"aten.sum on the compute stream reads memory that h2d"):
        device.sum()
    with pytest.raises(HazardError, match=r"aten.fill_ on the compute stream writes memory that d2h .* reads"):
        spare.fill_(2.0)
    torch.ones(4).sum()  # memory no copy touches
    fake.current_stream().wait_event(loaded)
    assert device.sum() == 4 and spare.fill_(2.0).sum() == 8


def test_the_fake_catches_a_load_read_before_waiting():
    """The fake itself: a copy-stream load is not visible until compute waits for its event, a host copy
    of memory a queued copy writes is a race, an unrecorded event cannot be waited on, and elapsed time
    is readable only after both events completed."""
    fake = FakeCuda()
    src, dst = fake.empty_host((4,), torch.float32).fill_(1.0), torch.zeros(4)
    fake.copy_stream.wait_stream(fake.current_stream())
    done = fake.event()
    with fake.stream(fake.copy_stream):
        begin, end = fake.event(timing=True), fake.event(timing=True)
        begin.record()
        fake.copy(dst, src, "h2d")
        end.record()
        done.record()
    assert dst.sum() == 0, "not run yet"
    with pytest.raises(HazardError, match="not completed"):
        begin.elapsed_time(end)
    with pytest.raises(HazardError, match="still queued"):
        fake.host_copy(torch.empty(4), dst)
    with pytest.raises(HazardError, match="never recorded"):
        fake.current_stream().wait_event(fake.event())
    fake.current_stream().wait_event(done)
    assert dst.sum() == 4 and begin.elapsed_time(end) > 0


def test_a_prefetch_that_finds_no_room_copies_nothing(tiny, fakes, monkeypatch):
    """A prefetch whose arena finds no room in the pool (injected here) must fail before its prefix
    crosses PCIe: the group loads again later, so staged bytes would cross twice. On llama2-7b shapes
    (plan-only, prefetch forced on) w64 at a 2 GB budget staged 260 MB that way, w32x128 528 MB."""
    one_candidate_groups(monkeypatch)
    working, prefetch, wasted, prefetching = store_module.KVStore.working, GroupExecutor._prefetch, [], []

    def no_room_for_an_arena(store, shapes, *, from_end=True):
        if prefetching and len(shapes[0]) == 6:  # [L, 2, B, H, W + k, D]
            raise PoolExhausted("injected: no room for the arena")
        return working(store, shapes, from_end=from_end)

    def failing(executor, group, live, carry):
        before = executor.store.counters.step["h2d"]
        prefetching.append(True)
        try:
            assert prefetch(executor, group, live, carry) is None
        finally:
            prefetching.pop()
        wasted.append(executor.store.counters.step["h2d"] - before)

    monkeypatch.setattr(store_module.KVStore, "working", no_room_for_an_arena)
    monkeypatch.setattr(GroupExecutor, "_prefetch", failing)
    cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny, SEARCH, 3.0), prefix_order=False)
    emulated, cuda = emulated_and_cuda(fakes, tiny, SEARCH, cache)
    assert wasted and wasted == [0] * len(wasted)
    assert_same_run(emulated, cuda)
    assert [b[:2] for b in step_bytes(cuda)] == [b[:2] for b in step_bytes(emulated)], "H2D and D2H"


@pytest.mark.parametrize("prefix_order", [False, True])
def test_what_fits_of_the_next_group_crosses_pcie_while_the_group_before_computes(tiny, fakes, monkeypatch,
                                                                                  prefix_order):  # fmt: skip
    """Balanced groups leave no room for a whole next group, so CUDA copies what fits of it ahead
    (engine/kv/staging.py): those copies are still queued while the group before decodes, the next load copies
    the blocks on the device from there, and the events name the members copied whole as prefetched. Without
    prefix order every PCIe byte is the emulated run's and the device copies are more by exactly the bytes
    copied ahead; with it, blocks the group before placed are taken on instead of crossing again."""
    staged: list[tuple[int, int]] = []  # (bytes copied ahead over PCIe, on the device), per staging
    whole: list[tuple[int, ...]] = []  # members each staging copied whole
    stage = GroupExecutor._copy_ahead

    def noting(executor, group, live, batch):
        before = dict(executor.store.counters.step)
        result = stage(executor, group, live, batch)
        staged.append((executor.store.counters.step["h2d"] - before["h2d"],
                       executor.store.counters.step["d2d"] - before["d2d"]))  # fmt: skip
        whole.append(result.members if result is not None else ())
        return result

    monkeypatch.setattr(GroupExecutor, "_copy_ahead", noting)
    cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny, SPECULATING, 1.3), speculative=True,
                        prefix_order=prefix_order)  # fmt: skip
    emulated = search_trace(tiny, SPECULATING, cache)
    log = spy_groups(monkeypatch, fakes)
    fakes.on = True
    cuda = search_trace(tiny, SPECULATING, cache)
    assert_same_run(emulated, cuda)
    assert sum(h2d for h2d, _ in staged) > 0, "blocks were copied ahead"
    decodes = [entry for entry in log if entry[0] == "decode"]
    assert all(ready for _, _, ready, _ in decodes) and any(queued for *_, queued in decodes)
    assert_bytes_as_emulated(cuda, emulated)
    cuda_total, emulated_total = ([sum(col) for col in zip(*step_bytes(run), strict=True)] for run in (cuda, emulated))
    if not prefix_order:
        assert cuda_total[0] == emulated_total[0], "the same PCIe bytes, earlier"
        assert cuda_total[2] == emulated_total[2] + sum(h2d for h2d, _ in staged)
    named = [e.prefetched for e in cuda[0] if isinstance(e, ev.GroupScheduled) and e.prefetched]
    assert named == [m for m in whole if m], "the events name the members copied whole, and only them"
    modelled = [e.prefetched for e in emulated[0] if isinstance(e, ev.GroupScheduled) and e.prefetched]
    assert modelled == named, "the emulated device's timing model hides what CUDA copies ahead"
