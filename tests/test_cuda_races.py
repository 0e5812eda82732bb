"""Races between the compute stream and the copy stream that only a GPU would show, found by reading the CUDA
branches against CUDA's rules (2026-12-07); each runs through the fake of CUDA's streams (tests/fake_cuda.py),
which raises on a copy that touches memory a queued copy of the other stream reads or writes.

- A lent row (FlashTTS: a row whose candidate has no run left decodes another's) copies on the compute stream in
  the middle of its group's decode, while the copy stream may still read what it writes: the previous group's
  write-back reads runs the lend's save takes, and the next group's prefetch (prefix-aware order's carry) reads
  the lent row's loaded columns, which the lend overwrites. Once lent, the row's loaded blocks are no longer
  where the load put them, so a group loaded after the lend must not carry them from there (the emulated device
  did, and sampled other tokens).
- Head-wise's retry after an out-of-memory error rewrote the host arena that the failed attempt's copies to the
  host could still be writing.
- An out-of-memory error in the next group's prefetch split the group that had fitted (one candidate: the run
  failed); the prefetch is dropped instead and the group loads after the one before it.
- A load on the copy stream made `torch.tensor(values, device=cuda)` copies, which synchronize the current
  stream: the host stood still until every copy queued before had crossed PCIe.
- `auto`'s move of in_device's KV to the host (free device memory fell) dropped each run's device copy as soon
  as its copy to the host was queued, and waited only after the last; a copy that failed part way left host
  blocks not yet written, which the failed run's close kept in the prefix cache (RAM and disk: later runs with
  that prompt would load them).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from engine.config import CacheConfig
from engine.kv import cache as cache_module
from engine.kv import head_stream, headwise, prefix_cache
from engine.kv import store as store_module
from engine.kv.groups import GroupExecutor
from engine.kv.lbs import LbsPolicy
from engine.kv.offload import move_to_host
from engine.kv.policy import Group, StepPlan
from engine.search import run
from tests.fake_cuda import FakeCuda, Fakes
from tests.test_cuda_paths import LENDING, emulated_and_cuda, one_candidate_groups
from tests.test_equivalence import (
    QUESTION,
    SEARCH,
    assert_same_observed,
    assert_same_run,
    footprint_budget,
    search_trace,
)
from tests.test_kv_spill import SEARCH as SPILLING
from tests.test_kv_spill import falling_free_memory


@pytest.fixture
def fakes(monkeypatch, watch_kernels) -> Fakes:
    made = Fakes()
    monkeypatch.setattr(store_module, "streams_for", made.streams_for)
    return made


def groups_of(size: int, monkeypatch) -> None:
    """lbs's own candidates in its order, cut into groups of `size` (room for the next group's prefetch)."""
    plan = LbsPolicy.plan

    def cut(policy, work, budget):
        ids = [c for g in plan(policy, work, budget).groups for c in g.candidates]
        return StepPlan("lbs", tuple(Group(tuple(ids[i : i + size])) for i in range(0, len(ids), size)))

    monkeypatch.setattr(LbsPolicy, "plan", cut)


def test_a_lent_rows_save_waits_for_the_previous_groups_write_back(tiny, fakes):
    """The planner's own groups, a budget of about 3 candidates: a group prefetched while the one before it
    computed lends a row while that one's write-back is still queued, reading the run the save takes."""
    search = replace(LENDING, seed=2)
    cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny, search, 3.0), speculative=True)
    emulated, cuda = emulated_and_cuda(fakes, tiny, search, cache)
    assert_same_run(emulated, cuda)


def test_a_lent_row_is_not_carried_to_the_next_group_from_where_its_blocks_were(tiny, fakes, monkeypatch):
    """Groups of six with prefix-aware order: on CUDA the next group's prefetch reads the lent row's blocks before
    the lend may overwrite them; on the emulated device the next group loads after the decode and takes them from
    the host. Both observe in_device's tokens and logits."""
    search = replace(LENDING, seed=1)
    reference = search_trace(tiny, search, CacheConfig(policy="in_device"))  # no speculation: every token seen
    groups_of(6, monkeypatch)
    cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny, search, 16.0), speculative=True,
                        balanced_prefetch=False)  # fmt: skip
    emulated, cuda = emulated_and_cuda(fakes, tiny, search, cache)
    assert_same_observed(reference, emulated)
    assert_same_observed(reference, cuda)
    steps = [e for e in emulated[0] if e.type == "transfer_stats"]
    assert any(e.groups > 1 for e in steps) and steps[-1].speculative_lent_runs > 0  # several groups, rows lent


def test_headwise_retries_out_of_memory_only_once_its_copies_to_the_host_arena_landed(tiny, fakes, monkeypatch):
    """Out of memory in the last layer's attention of a group of two or more rows, after earlier layers' new
    tokens were sent to the host arena: when the retry's load starts writing that arena, no copy writes it."""
    group, load, state, dirty = head_stream.HeadStream._group, headwise.HeadwisePolicy._load, {"raised": 0}, []

    def failing(stream, item, query, *args):
        last_layer = item == stream.num_groups * (stream.num_layers - 1)
        if not state["raised"] and query.shape[0] > 1 and stream.past > 0 and last_layer:
            state["raised"] = 1
            raise torch.OutOfMemoryError("injected: the last layer's attention does not fit")
        return group(stream, item, query, *args)

    def loading(policy, members, heads, whole=False):
        if state["raised"] == 1 and policy._arena is not None:
            state["raised"] = 2
            dirty.append(not fakes.made[-1].ready(policy._arena))
        return load(policy, members, heads, whole)

    monkeypatch.setattr(head_stream.HeadStream, "_group", failing)
    monkeypatch.setattr(headwise.HeadwisePolicy, "_load", loading)
    cache = CacheConfig(policy="headwise", kv_budget_bytes=footprint_budget(tiny, SEARCH, 0.5))
    fakes.on = True
    try:
        search_trace(tiny, SEARCH, cache)
    finally:
        fakes.on = False
    assert state["raised"] == 2, "the out-of-memory error was injected and the group retried"
    assert dirty == [False], "the retry's host writes began while the failed attempt's copies to the host were queued"


def test_out_of_memory_in_a_prefetch_drops_the_prefetch_and_splits_nothing(tiny, fakes, monkeypatch):
    """Groups of one candidate (a group that cannot be split): device memory runs out in every prefetch (a staging
    buffer beside the budget). The run gives the emulated run's tokens, each group loaded after the one before."""
    one_candidate_groups(monkeypatch)
    cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny, SEARCH, 3.0), prefix_order=False)
    emulated = search_trace(tiny, SEARCH, cache)
    load, failed = GroupExecutor._load, []

    def no_memory_early(executor, group, live, carry=None, strict=False, early=False):
        if early:
            failed.append(group)
            raise torch.OutOfMemoryError("injected: a prefetch's temporary does not fit")
        return load(executor, group, live, carry, strict, early)

    monkeypatch.setattr(GroupExecutor, "_load", no_memory_early)
    fakes.on = True
    try:
        cuda = search_trace(tiny, SEARCH, cache)
    finally:
        fakes.on = False
    assert failed, "prefetches were tried"
    assert_same_run(emulated, cuda)
    assert not [e for e in cuda[0] if e.type == "group_retried"], "no group was split for a prefetch's error"


def test_a_load_on_the_copy_stream_makes_no_blocking_host_to_device_copy(tiny, fakes, monkeypatch):
    """lbs with cascade attention, groups of four (siblings of two parents: a parent level) and room for a
    prefetch: nothing copies host memory to the device with `non_blocking=False` (on CUDA a sync of the current
    stream) while the copy stream is current."""
    groups_of(4, monkeypatch)
    made, to, blocking = torch.tensor, torch.Tensor.to, []

    def on_copy_stream() -> bool:
        return any(f.current is f.copy_stream for f in fakes.made)

    def watched_tensor(*args, **kwargs):
        if kwargs.get("device") is not None and on_copy_stream():
            blocking.append("torch.tensor(..., device=...)")
        return made(*args, **kwargs)

    def watched_to(tensor, *args, **kwargs):
        if not kwargs.get("non_blocking") and tensor.device.type == "cpu" and on_copy_stream():
            blocking.append(f"Tensor.to{args}")
        return to(tensor, *args, **kwargs)

    monkeypatch.setattr(torch, "tensor", watched_tensor)
    monkeypatch.setattr(torch.Tensor, "to", watched_to)
    cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny, SEARCH, 16.0), prefix_order=False)
    fakes.on = True
    try:
        trace = search_trace(tiny, SEARCH, cache)
    finally:
        fakes.on = False
    assert any(e.groups > 1 for e in trace[0] if e.type == "transfer_stats")
    assert blocking == [], f"blocking host-to-device copies on the copy stream: {sorted(set(blocking))}"


def test_out_of_memory_while_copying_ahead_gives_its_run_back_and_copies_nothing_ahead(tiny, fakes, monkeypatch):
    """Balanced groups leave room only to copy part of the next group ahead (engine/kv/staging.py). When a copy
    there runs out of device memory, the run it took goes back to the pool (it stayed taken for the rest of the
    step) and the step goes on as without copy-ahead: the emulated run's tokens."""
    from engine.kv import staging
    from engine.kv.arena import BlockCopier

    cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny, LENDING, 1.3), speculative=True,
                        prefix_order=False)  # fmt: skip
    emulated = search_trace(tiny, LENDING, cache)
    taken, given_back = [], []

    class NoMemory(BlockCopier):
        def copy(self, *args, **kwargs):
            raise torch.OutOfMemoryError("injected: a staging buffer does not fit")

    working, release = store_module.KVStore.working, store_module.KVStore.release

    def noting_working(store, shapes, *, from_end=True):
        tensors, run = working(store, shapes, from_end=from_end)
        if not from_end:  # copy-ahead takes its run from the pool's start
            taken.append(run)
        return tensors, run

    def noting_release(store, run):
        given_back.append(run)
        return release(store, run)

    monkeypatch.setattr(staging, "BlockCopier", NoMemory)
    monkeypatch.setattr(store_module.KVStore, "working", noting_working)
    monkeypatch.setattr(store_module.KVStore, "release", noting_release)
    fakes.on = True
    try:
        cuda = search_trace(tiny, LENDING, cache)
    finally:
        fakes.on = False
    assert taken and all(any(run is back for back in given_back) for run in taken)
    assert_same_run(emulated, cuda)


def kept_prefix_blocks() -> dict[bytes, torch.Tensor]:
    (cache,) = prefix_cache._SHARED.values()
    return {key: entry.kv.clone() for key, entry in cache.entries.items()}


def test_a_move_to_the_host_that_fails_part_way_keeps_no_unwritten_block_in_the_prefix_cache(
    tiny, tmp_path, monkeypatch, watch_kernels
):
    """`auto` with the prefix cache: free memory falls at step 3 (the move to the host), whose second run's copy
    runs out of device memory. The run fails with that error, and the prompt's blocks it keeps are those a run
    where nothing failed keeps."""
    monkeypatch.setenv("BEAMWISE_PREFIX_CACHE_DIR", str(tmp_path / "prefix-kv"))
    prefix_cache.forget_shared()
    list(run(QUESTION, tiny, SPILLING, CacheConfig(policy="in_device", prefix_cache=True)))
    want = kept_prefix_blocks()
    prefix_cache.forget_shared()
    monkeypatch.setenv("BEAMWISE_PREFIX_CACHE_DIR", str(tmp_path / "cold"))  # the failed run keeps them anew

    made: list[FakeCuda] = []
    monkeypatch.setattr(store_module, "streams_for", lambda device: made.append(FakeCuda(staged=True)) or made[-1])
    falling_free_memory(monkeypatch, after_calls=3, left=0.35)

    def failing_move(store, blocks, tables):
        copies, real = [], store.copy

        def copy(dst, src, direction, owners=()):
            copies.append(direction)
            if len(copies) == 2:  # the first run's copy (the prompt's blocks) is queued
                raise torch.OutOfMemoryError("injected: the device temporary of a run's copy")
            real(dst, src, direction, owners)

        store.copy = copy
        try:
            return move_to_host(store, blocks, tables)
        finally:
            del store.copy

    monkeypatch.setattr(cache_module, "move_to_host", failing_move)
    try:
        events = list(run(QUESTION, tiny, SPILLING, CacheConfig(policy="auto", prefix_cache=True)))
        got = kept_prefix_blocks()
    finally:
        prefix_cache.forget_shared()
    assert made and events[-1].type == "run_failed" and events[-1].error == "OutOfMemoryError", events[-1]
    assert want and got and set(got) <= set(want)  # the prompt's blocks (the finished run kept its answer's too)
    assert all(torch.equal(values, want[key]) for key, values in got.items()), "a block kept before it was written"
