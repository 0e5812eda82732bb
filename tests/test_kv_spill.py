"""`auto` on a device whose free memory falls mid-run (another program takes it): in_device's KV at rest crosses to
the host once and the run goes on with lbs, with in_device's tokens and logits; the move is exact and said in the
events. An explicit in_device still fails with its budget error (engine/kv/offload.py, engine/kv/cache.py)."""

from __future__ import annotations

import functools

import pytest

from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.kv import store as store_module
from engine.kv.blocks import Tier
from engine.kv.cache import CUDA_MARGIN, KVCache
from engine.kv.offload import move_to_host
from engine.runner import decode_step, prefill
from engine.sampling import candidate_generator
from engine.search import run
from tests.fake_cuda import FakeCuda
from tests.test_equivalence import QUESTION, assert_same_run, search_trace
from tests.test_kv_faults import observed_rules

pytestmark = pytest.mark.usefixtures("watch_kernels")  # every compute kernel checked against queued copies

SEARCH = SearchConfig(beams=2, width=3, step_tokens=6, max_steps=4, step_delimiter=None, seed=7)


def falling_free_memory(monkeypatch, after_calls: int, left: float) -> list[int]:
    """Free device memory as a run reads it: plenty at first (the budget and pool are the whole search's), then
    from read `after_calls` on, `left` of the pool less than the activation margin needs. Returns the reads."""
    reads: list[int] = []

    def free_bytes(kv: KVCache) -> int:
        reads.append(len(reads))
        if len(reads) == 1:
            return CUDA_MARGIN + (1 << 40)
        if len(reads) <= after_calls:
            return CUDA_MARGIN
        return CUDA_MARGIN - int((1 - left) * kv.store.device_capacity_bytes)

    monkeypatch.setattr(KVCache, "_free_bytes", free_bytes)
    return reads


@pytest.mark.parametrize("speculative", [False, True], ids=["plain", "speculative"])
def test_auto_moves_the_kv_to_the_host_when_free_memory_falls_and_gives_in_devices_tokens(tiny, monkeypatch,
                                                                                         speculative):  # fmt: skip
    reference = search_trace(tiny, SEARCH, CacheConfig(policy="in_device", speculative=speculative))
    falling_free_memory(monkeypatch, after_calls=3, left=0.35)  # steps 1 and 2 as before, then 35% of the pool
    run = search_trace(tiny, SEARCH, CacheConfig(policy="auto", speculative=speculative))
    assert_same_run(reference, run)
    events = run[0]
    started = next(e for e in events if isinstance(e, ev.RunStarted))
    assert started.policy == "in_device"
    changes = [e for e in events if isinstance(e, ev.PolicyChanged)]
    assert [(c.step, c.previous, c.policy) for c in changes] == [(3, "in_device", "lbs")]
    assert "too small for keeping the whole search on the device" in changes[0].reason
    stats = {e.step: e for e in events if isinstance(e, ev.TransferStats)}
    assert stats[2].d2h_bytes == 0 and stats[2].h2d_bytes == 0
    assert 0 < changes[0].moved_bytes <= stats[3].step_d2h_bytes and stats[3].step_h2d_bytes > 0
    rest = [e for e in events if isinstance(e, ev.MemorySnapshot) and e.step >= 3]
    assert rest and all(e.device_bytes == 0 < e.host_bytes for e in rest)


def test_an_explicit_in_device_still_says_its_budget_is_too_small(tiny, monkeypatch):
    falling_free_memory(monkeypatch, after_calls=3, left=0.35)
    events = list(run(QUESTION, tiny, SEARCH, CacheConfig(policy="in_device")))
    assert events[-1].type == "run_failed" and events[-1].error == "KVBudgetTooSmall", events[-1]
    assert not [e for e in events if isinstance(e, ev.PolicyChanged)]


@pytest.mark.parametrize("cuda", [False, True], ids=["emulated", "cuda-fake"])
def test_moving_to_the_host_copies_each_block_once_exactly_and_frees_the_device(tiny, monkeypatch, cuda):
    """After a step of 2 x 3 children (shared prompt, copied tails): every block crosses once, its bytes are its
    tokens' and go to its holders in parts that sum to the whole, and the host holds the device's values (on
    CUDA once the move returns: its copies are asynchronous)."""
    if cuda:
        monkeypatch.setattr(store_module, "streams_for", lambda device: FakeCuda(staged=True))
    prompt, _, rules = observed_rules(tiny, 5)
    kv = KVCache(tiny, SEARCH, CacheConfig(policy="in_device"), len(prompt),
                 decode=lambda cache, mask, rows, stop, hook=None, **forward: _decode(tiny, rules, cache, mask, rows,
                                                                                    stop, hook, **forward),
                 prefill=lambda ids, **options: _prefill(tiny, ids, **options))  # fmt: skip
    kv.prefill(prompt)
    for child in range(1, 7):
        kv.fork(None, child, candidate_generator(0, child))
    list(kv.decode_step(list(range(1, 7)), lambda: False))
    kv.release(2)  # pruned: its blocks are gone
    tables = [(c, live.table) for c, live in kv.live.items()]
    resting = {b for _, table in tables for b in table}
    assert all(kv.store.holds(b, Tier.DEVICE) for b in resting)
    before = {b: kv.store.view(b, Tier.DEVICE, kv.blocks.blocks[b].num_tokens).clone() for b in resting}
    kv.store.counters.start_step()
    moved = move_to_host(kv.store, kv.blocks, tables)
    assert moved == sum(kv.blocks.blocks[b].num_tokens for b in resting) * kv.store.token_bytes
    assert kv.store.counters.step["d2h"] == moved and kv.store.resident_bytes(Tier.DEVICE) == 0
    assert sum(parts["d2h"] for parts in kv.store.counters.per_candidate().values()) == moved
    for block_id, values in before.items():
        assert kv.store.holds(block_id, Tier.HOST) and not kv.store.holds(block_id, Tier.DEVICE)
        assert kv.blocks.blocks[block_id].placement == "host"
        assert kv.store.view(block_id, Tier.HOST, values.shape[3]).equal(values)
    assert kv.store.counters.step_calls["d2h"] < len(resting), "consecutive blocks cross in one copy"
    kv.close()


def _decode(loaded, rules, cache, mask, rows, stop, hook=None, **forward):
    return decode_step(functools.partial(loaded.model, **forward), cache, mask, rows, rules, stop, hook)


def _prefill(loaded, ids, **options):
    return prefill(loaded.model, ids, loaded.device, **options)[0]


def test_the_move_is_ordered_before_lbs_reads_the_host_blocks_on_cuda(tiny, monkeypatch):
    """Through the CUDA branches (tests/fake_cuda.py: copies run as late as CUDA may, a race raises): the move's
    asynchronous copies to the host are done before anything reads those blocks, with in_device's tokens."""
    reference = search_trace(tiny, SEARCH, CacheConfig(policy="in_device"))
    fakes: list[FakeCuda] = []
    monkeypatch.setattr(store_module, "streams_for", lambda device: fakes.append(FakeCuda(staged=True)) or fakes[-1])
    falling_free_memory(monkeypatch, after_calls=3, left=0.35)
    run = search_trace(tiny, SEARCH, CacheConfig(policy="auto"))
    assert fakes and [e.policy for e in run[0] if isinstance(e, ev.PolicyChanged)] == ["lbs"]
    assert_same_run(reference, run)
