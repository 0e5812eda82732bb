"""Slot pools: runs of consecutive slots, freed and coalesced exactly; views of one tensor, never copies."""

from __future__ import annotations

import random

import pytest
import torch

from engine.kv.pool import PoolExhausted, Run, RunAllocator, SlotPool


def test_runs_coalesce_when_freed_and_first_fit_reuses_the_hole():
    a = RunAllocator(10)
    first, middle, last = a.allocate(3), a.allocate(4), a.allocate(3)
    assert (first, middle, last) == (Run(0, 3), Run(3, 4), Run(7, 3)) and a.used == 10
    with pytest.raises(PoolExhausted):
        a.allocate(1)
    a.free(middle)
    a.free(first)
    assert a.allocate(7) == Run(0, 7), "the two freed neighbours must merge into one hole"


def test_transient_runs_come_from_the_end():
    a = RunAllocator(10)
    assert a.allocate(2, from_end=True) == Run(8, 2)
    assert a.allocate(1) == Run(0, 1)


def test_double_free_is_an_error():
    a = RunAllocator(4)
    run = a.allocate(2)
    a.free(run)
    with pytest.raises(RuntimeError, match="freed twice"):
        a.free(run)


def test_limit_caps_use_below_capacity():
    a = RunAllocator(8)
    a.limit = 3
    a.allocate(3)
    with pytest.raises(PoolExhausted):
        a.allocate(1)


def test_random_allocations_never_overlap_and_free_everything():
    rng = random.Random(0)
    a, held = RunAllocator(64), []
    for _ in range(2000):
        if held and (rng.random() < 0.5 or a.used > 48):
            a.free(held.pop(rng.randrange(len(held))))
        else:
            try:
                held.append(a.allocate(rng.randint(1, 6), from_end=rng.random() < 0.3))
            except PoolExhausted:
                continue
        slots = [s for run in held for s in range(run.start, run.start + run.length)]
        assert len(slots) == len(set(slots)) == a.used and all(0 <= s < 64 for s in slots)
    for run in held:
        a.free(run)
    assert a.used == 0 and a.allocate(64) == Run(0, 64)


def test_device_pool_runs_are_views_of_one_tensor():
    pool = SlotPool((2, 2, 1, 4, 3), torch.float32, torch.device("cpu"), capacity=6)
    run = pool.allocate(2)
    segment = pool.segment(run)
    assert segment.shape == (2, 2, 1, 8, 3)
    segment.fill_(7.0)
    assert pool.flat(run).eq(7.0).all() and pool.flat(run).data_ptr() == segment.data_ptr()


def test_host_pool_grows_by_chunks_and_no_run_spans_two():
    pool = SlotPool((1, 2, 1, 2, 2), torch.float32, torch.device("cpu"), capacity=0, chunk=3)
    runs = [pool.allocate(2) for _ in range(3)]
    assert pool.allocator.capacity == 9  # three chunks of 3: a run of 2 never straddles a chunk boundary
    for run in runs:
        assert run.start // 3 == (run.start + run.length - 1) // 3
        pool.segment(run).zero_()
    for run in runs:
        pool.free(run)
    with pytest.raises(PoolExhausted):
        pool.allocator.allocate(4)  # chunks are never merged into one run


@pytest.mark.parametrize(
    ("policy", "budget", "stop_after", "last"),
    [
        ("in_device", None, None, "run_finished"),
        ("lbs", 160_000, None, "run_finished"),
        ("layerwise", 700_000, None, "run_finished"),
        ("layerwise", 500_000, None, "run_failed"),  # grows past its budget in a later step
        ("lbs", 160_000, 1, "run_cancelled"),
    ],
)
def test_a_run_gives_its_kv_pools_back_when_it_ends(tiny, monkeypatch, policy, budget, stop_after, last):
    """Finished, failed or cancelled, the run's KV memory is freed at once: no reference cycle keeps
    the cache alive until a garbage collection (on a GPU, the next run would find the memory taken)."""
    import gc
    import weakref

    from engine.config import CacheConfig, SearchConfig
    from engine.kv import cache as kv_cache
    from engine.search import run

    made, init = [], kv_cache.KVCache.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append((weakref.ref(self), weakref.ref(self.store.pools[kv_cache.Tier.DEVICE]._chunks[0])))

    monkeypatch.setattr(kv_cache.KVCache, "__init__", recording_init)
    steps = []
    should_stop = (lambda: len(steps) >= stop_after) if stop_after else (lambda: False)
    search = SearchConfig(beams=2, width=3, step_tokens=6, max_steps=3, step_delimiter=None, seed=7)
    gc.disable()
    try:
        for event in run("What is 2+3?", tiny, search, CacheConfig(policy=policy, kv_budget_bytes=budget),
                         should_stop=should_stop):  # fmt: skip
            if event.type == "step_selected":
                steps.append(event)
        assert event.type == last
        (cache, device_pool), = made
        assert cache() is None and device_pool() is None
    finally:
        gc.enable()


def test_a_token_major_pool_gives_every_range_of_a_runs_tokens_as_contiguous_rows():
    """The host pool keeps a run's tokens one after another, each `[L, 2, H, D]`: its segment reads as
    `[L, 2, H, T, D]` like the device pool's, and any range of tokens is one contiguous piece of memory (so it
    crosses PCIe in one asynchronous copy)."""
    pool = SlotPool((2, 2, 3, 4, 5), torch.float32, torch.device("cpu"), capacity=0, chunk=8, layout="token")
    run = pool.allocate(3)
    segment = pool.segment(run)
    assert segment.shape == (2, 2, 3, 12, 5) and not segment.is_contiguous()
    segment.copy_(torch.arange(segment.numel(), dtype=torch.float32).view(segment.shape))
    for start, stop in ((0, 12), (4, 9), (11, 12)):
        rows = segment[:, :, :, start:stop].permute(3, 0, 1, 2, 4)
        assert rows.is_contiguous() and rows.data_ptr() == pool.flat(run)[start * 60 :].data_ptr()
    assert torch.equal(pool.segment(run)[1, 0, 2, 7], segment[1, 0, 2, 7])


def test_a_head_major_pool_gives_one_layers_head_group_as_one_contiguous_piece_per_head():
    """Head-wise's host pool keeps a run head by head within each layer, each head's tokens one after another
    with K and V side by side: the segment reads as `[L, 2, H, T, D]`, one layer's head is one contiguous piece
    over any range of tokens, and a head group of the whole run is one piece."""
    pool = SlotPool((2, 2, 4, 4, 5), torch.float32, torch.device("cpu"), capacity=0, chunk=8, layout="head")
    run = pool.allocate(3)
    segment = pool.segment(run)
    assert segment.shape == (2, 2, 4, 12, 5) and not segment.is_contiguous()
    segment.copy_(torch.arange(segment.numel(), dtype=torch.float32).view(segment.shape))
    head = segment[1, :, 2, 3:9].permute(1, 0, 2)  # layer 1, head 2, tokens 3..8: [T, 2, D]
    assert head.is_contiguous() and head.data_ptr() == pool.flat(run)[((1 * 4 + 2) * 12 + 3) * 10 :].data_ptr()
    group = segment[0, :, 2:4].permute(1, 2, 0, 3)  # layer 0, heads 2 and 3, every token: [2 heads, T, 2, D]
    assert group.is_contiguous()
    with pytest.raises(ValueError, match="unknown pool layout 'rows'"):
        SlotPool((2, 2, 4, 4, 5), torch.float32, torch.device("cpu"), capacity=1, layout="rows")
