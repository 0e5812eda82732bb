"""CUDA only: the device pool, the copy stream and its events, prefetch, out-of-memory splitting, and
float32 equivalence on the GPU. Collected everywhere, skipped without CUDA."""

from __future__ import annotations

import pytest
import torch

from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.kv.blocks import BlockManager, Tier
from engine.kv.store import KVStore
from engine.models import load_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def tiny_cuda():
    return load_model(ModelSpec("synthetic:tiny-llama"), device="cuda")


def make_store(budget: int = 1 << 20) -> KVStore:
    blocks = BlockManager(4)
    return KVStore(
        blocks, num_layers=2, num_kv_heads=2, head_dim=8, dtype=torch.float32, device=torch.device("cuda"),
        budget_bytes=budget,
    )  # fmt: skip


def test_the_device_pool_is_one_allocation_and_host_slots_are_pinned():
    store = make_store()
    device_pool, host_pool = store.pools[Tier.DEVICE], store.pools[Tier.HOST]
    assert len(device_pool._chunks) == 1 and device_pool._chunks[0].is_cuda
    before = torch.cuda.memory_allocated()
    plan = store.blocks.allocate(list(range(10)), Tier.DEVICE)
    store.place(plan.new_blocks, Tier.DEVICE)
    assert torch.cuda.memory_allocated() == before, "placing blocks must not allocate device memory"
    host_plan = store.blocks.allocate(list(range(6)), Tier.HOST)
    store.place(host_plan.new_blocks, Tier.HOST)
    assert host_pool._chunks[0].is_pinned()


def test_a_load_on_the_copy_stream_is_seen_by_compute_after_waiting():
    store = make_store()
    plan = store.blocks.allocate(list(range(8)), Tier.HOST)
    store.place(plan.new_blocks, Tier.HOST)
    source = torch.arange(store.pools[Tier.HOST].slot_elements, dtype=torch.float32).view(store.slot_shape)
    store.view(plan.new_blocks[0], Tier.HOST).copy_(source)
    (target,), run = store.working([store.slot_shape])
    with store.loading() as done:
        store.copy(target, store.view(plan.new_blocks[0], Tier.HOST), "h2d")
    assert done is not None
    store.wait_loaded(done)
    assert torch.equal((target * 1).cpu(), source)  # a compute-stream kernel reads the loaded data
    store.sync()
    assert store.counters.step["h2d"] == source.numel() * 4 and store.counters.step_copy_seconds > 0
    store.release(run)



def test_a_copy_on_the_device_is_timed_by_cuda_events_not_by_its_launch():
    """A device-to-device copy is queued, not done, when `copy_` returns: its time is the CUDA events'
    (added at `sync`), so the step's copy seconds hold it only after the sync."""
    store = make_store()
    (source, target), run = store.working([store.slot_shape, store.slot_shape])
    store.copy(target, source, "d2d")
    assert store.counters.step_copy_seconds == 0 and len(store._timed) == 1
    store.sync()
    assert store.counters.step["d2d"] == source.numel() * 4 and store.counters.step_copy_seconds > 0
    store.release(run)

def run_search(loaded, cache: CacheConfig):
    from engine.search import run

    search = SearchConfig(beams=2, width=3, step_tokens=6, max_steps=3, step_delimiter=None, seed=7)
    observed = {}
    events = list(
        run("What is 2+3?", loaded, search, cache,
            observe_logits=lambda cid, logits, token: observed.setdefault(cid, []).append((logits.cpu(), token)))
    )  # fmt: skip
    assert events[-1].type == "run_finished", events[-1]
    return events, observed


@pytest.mark.parametrize(
    "cache",
    [
        CacheConfig(policy="lbs", kv_budget_bytes=160_000),
        CacheConfig(policy="lbs", kv_budget_bytes=160_000, inter_beam=False),
        CacheConfig(policy="layerwise", kv_budget_bytes=700_000),
        CacheConfig(policy="headwise", kv_budget_bytes=160_000),  # two KV heads a group: a piece per head
        CacheConfig(policy="headwise", kv_budget_bytes=100_000),  # one KV head a group
    ],
    ids=["lbs", "lbs-no-sharing", "layerwise", "headwise", "headwise-one-head"],
)
def test_policies_match_in_device_in_float32_on_cuda(tiny_cuda, cache):
    _, reference = run_search(tiny_cuda, CacheConfig(policy="in_device"))
    events, observed = run_search(tiny_cuda, cache)
    assert set(observed) == set(reference)
    for cid, positions in reference.items():
        assert [t for _, t in observed[cid]] == [t for _, t in positions]
        got = torch.stack([lg for lg, _ in observed[cid]])
        want = torch.stack([lg for lg, _ in positions])
        torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    if cache.policy == "lbs":
        assert max(e.groups for e in events if e.type == "transfer_stats") >= 2, "pick a budget that splits groups"


def test_lbs_prefetches_the_next_group_on_the_copy_stream(tiny_cuda):
    events, _ = run_search(tiny_cuda, CacheConfig(policy="lbs", kv_budget_bytes=160_000))
    stats = [e for e in events if e.type == "transfer_stats"]
    assert all(s.copy_seconds > 0 for s in stats[1:]), "copy time is read from CUDA events"
    assert all(0 <= s.stall_share < 1 for s in stats)


def test_lbs_copies_ahead_what_fits_of_the_next_group(tiny_cuda):
    """The settings of tests/test_cuda_paths.py::test_what_fits_of_the_next_group_crosses_pcie_while_the_group_
    before_computes, where the fake streams show members of a next group copied ahead into the room the group
    before leaves (the same pool and plan here): on the GPU the events name them, and the tree, tokens and
    logits are in_device's (a candidate's speculated start, not observed, may differ in length between
    policies: its observed tokens are compared from the end)."""
    from tests.test_equivalence import SPECULATING, footprint_budget, search_trace

    cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny_cuda, SPECULATING, 1.3),
                        speculative=True)  # fmt: skip
    staged = search_trace(tiny_cuda, SPECULATING, cache)
    assert any(e.prefetched for e in staged[0] if e.type == "group_scheduled"), "members were copied ahead"
    reference = search_trace(tiny_cuda, SPECULATING, CacheConfig(policy="in_device", speculative=True))
    assert staged[2] == reference[2] and set(staged[1]) == set(reference[1])
    for cid, observed in reference[1].items():
        n = min(len(observed), len(staged[1][cid]))
        ours, theirs = staged[1][cid][len(staged[1][cid]) - n :], observed[len(observed) - n :]
        assert [t for _, t in ours] == [t for _, t in theirs]
        torch.testing.assert_close(torch.stack([lg for lg, _ in ours]), torch.stack([lg for lg, _ in theirs]),
                                   atol=1e-4, rtol=0)  # fmt: skip


def test_lbs_loads_and_writes_back_on_the_copy_stream(tiny_cuda, monkeypatch):
    """Every copy across PCIe a step's groups make in lbs (a group's load, its write-back) runs on the copy
    stream: loads before compute, write-backs while the next group computes."""
    from engine.kv.groups import GroupExecutor
    from engine.kv.store import KVStore

    streams: dict[str, set[bool]] = {"h2d": set(), "d2h": set()}
    inside = []  # set while a group loads or writes back (the prompt's prefill copies on the compute stream)
    copy = KVStore.copy

    def spy(self, dst, src, direction, owners=()):
        if inside and direction in streams:
            streams[direction].add(torch.cuda.current_stream(self.device) == self.streams.copy_stream)
        return copy(self, dst, src, direction, owners)

    def flagged(method):
        def wrapper(*args, **kwargs):
            inside.append(True)
            try:
                return method(*args, **kwargs)
            finally:
                inside.pop()
        return wrapper

    monkeypatch.setattr(KVStore, "copy", spy)
    monkeypatch.setattr(GroupExecutor, "_load", flagged(GroupExecutor._load))
    monkeypatch.setattr(GroupExecutor, "_write_back", flagged(GroupExecutor._write_back))
    events, _ = run_search(tiny_cuda, CacheConfig(policy="lbs", kv_budget_bytes=160_000))
    assert max(e.groups for e in events if e.type == "transfer_stats") >= 2
    assert streams == {"h2d": {True}, "d2h": {True}}

def test_the_carry_on_cuda_gives_in_devices_tokens_and_never_more_h2d(tiny_cuda, monkeypatch):
    """Prefix order's carry on the copy stream (the prefetch reads the current group's parent level and arena
    while it computes): in_device's tokens and logits, and H2D falls by exactly what D2D rises."""
    from engine.kv.groups import GroupExecutor
    from tests.test_equivalence import assert_same_run, footprint_budget, search_trace
    from tests.test_kv_carry import SHARING

    cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny_cuda, SHARING, 1.6), prefix_order=True)
    carried = search_trace(tiny_cuda, SHARING, cache)
    assert_same_run(search_trace(tiny_cuda, SHARING, CacheConfig(policy="in_device")), carried)
    monkeypatch.setattr(GroupExecutor, "_carry", lambda self, batch: None)
    plain = search_trace(tiny_cuda, SHARING, cache)
    last = lambda run: [e for e in run[0] if e.type == "transfer_stats"][-1]  # noqa: E731
    fell, rose = last(plain).h2d_bytes - last(carried).h2d_bytes, last(carried).d2d_bytes - last(plain).d2d_bytes
    assert fell == rose >= 0


def test_out_of_memory_on_cuda_splits_the_group_and_gives_the_same_tokens(tiny_cuda):
    from tests.test_kv_faults import run_cache

    reference, _, _ = run_cache(tiny_cuda, CacheConfig(policy="in_device"))
    tokens, groups, events = run_cache(tiny_cuda, CacheConfig(policy="in_device"), fail_above=2)
    assert tokens == reference and all(len(g) <= 2 for step in groups for g in step)
    assert any(e.type == "group_retried" for e in events)


def test_layerwise_streams_from_pinned_contiguous_host_buffers(tiny_cuda, monkeypatch):
    """Each layer-wise copy across PCIe is one contiguous copy to or from pinned memory (a strided
    or pageable one would be staged through a temporary and block the host)."""
    copies = []
    copy = KVStore.copy

    def checked(store, dst, src, direction, owners=()):
        if direction in ("h2d", "d2h"):
            host = src if direction == "h2d" else dst
            copies.append((host.is_pinned(), dst.is_contiguous() and src.is_contiguous()))
        copy(store, dst, src, direction, owners)

    monkeypatch.setattr(KVStore, "copy", checked)
    events, _ = run_search(tiny_cuda, CacheConfig(policy="layerwise", kv_budget_bytes=700_000))
    last = [e for e in events if e.type == "transfer_stats"][-1]
    assert copies and all(pinned and contiguous for pinned, contiguous in copies)
    assert last.h2d_calls + last.d2h_calls == len(copies)


def test_layerwise_out_of_memory_on_cuda_retries_with_fewer_resident_layers():
    """An out-of-memory error mid-step on CUDA (injected while layers stream, a load on the copy stream in
    flight): the step is rewound and run again with half the resident layers, and gives in_device's tokens."""
    from tests.test_layerwise_faults import LAYERWISE, ROWS, drive, fail_once, retries

    model = load_model(ModelSpec("synthetic:tiny-qwen2"), device="cuda")
    reference, _, _ = drive(model, CacheConfig(policy="in_device"))
    streaming = {2: lambda kv: 6 * kv.policy.layer_bytes(ROWS)}  # 4 layers resident at the step's start
    tokens, _, events = drive(model, LAYERWISE, fault=fail_once(2, 3), budget_at=streaming)
    assert tokens == reference
    (retried,) = retries(events)
    assert retried.reason.startswith("resident layers 3 -> 1")  # 4 at the start, 3 by forward 3


def test_torch_reports_the_pinned_memory_a_run_holds_and_idle_gives_both_caches_back(tiny_cuda):
    """The figures bench prints (`pinned_peak_bytes`, `pin_seconds`) are torch's, and the window's idle release
    hands back the device memory and the pinned blocks the run left cached (engine/idle.py)."""
    from engine.idle import release_cached_memory
    from engine.kv.streams import host_allocator_stats

    release_cached_memory()
    before = host_allocator_stats(reset_peak=True)
    assert before is not None, "this torch reports its host allocator"
    run_search(tiny_cuda, CacheConfig(policy="lbs", kv_budget_bytes=160_000))  # offloads: its host pool is pinned
    after = host_allocator_stats()
    assert after.peak > 0 and after.held > 0 and after.pin_seconds >= before.pin_seconds
    released = release_cached_memory()
    assert released.device_bytes > 0 and released.host_bytes > 0, released
    assert release_cached_memory() == type(released)(), "nothing is left cached to give back"


def test_cascade_attention_in_bf16_multiplies_into_float32_without_widening_the_keys(monkeypatch):
    """On CUDA, cascade attention's products read bf16 and write float32 (`torch.bmm(..., out_dtype=...)`), and
    give what the products of widened operands (the CPU's way) give, on a prefix, parents and padded suffixes."""
    import math
    from types import SimpleNamespace

    import engine.kv.attention as attention
    from engine.kv.attention import ParentHistory, SharedPrefix, cascade_attention

    cuda = torch.device("cuda")
    assert attention._float32_products(cuda, torch.bfloat16), "torch.bmm has out_dtype=float32 for bf16 on CUDA"
    generator = torch.Generator(device=cuda).manual_seed(0)
    randn = lambda *shape: torch.randn(*shape, generator=generator, device=cuda).bfloat16()  # noqa: E731
    batch, heads_q, heads, dim = 6, 8, 4, 128
    prefix = SharedPrefix(((randn(heads, 64, dim) * 2, randn(heads, 64, dim)),), ParentHistory(
        ((randn(3, heads, 20, dim) * 2, randn(3, heads, 20, dim)),),
        torch.arange(20, device=cuda)[None, :] < torch.tensor([20, 0, 7], device=cuda)[:, None],
        torch.tensor([0, 1, 2, 4, 6, 7], device=cuda), 3))  # fmt: skip
    own_k, own_v, query = randn(batch, heads, 9, dim) * 2, randn(batch, heads, 9, dim), randn(batch, heads_q, 1, dim)
    mask = (torch.arange(9, device=cuda)[None, :] >= torch.tensor([0, 3, 8, 5, 1, 2], device=cuda)[:, None])
    layer, scale = SimpleNamespace(layer_idx=0), 1 / math.sqrt(dim)
    products = []
    bmm = torch.bmm
    monkeypatch.setattr(torch, "bmm", lambda *a, **k: products.append(k.get("out_dtype")) or bmm(*a, **k))
    fast, _ = cascade_attention(layer, query, own_k, own_v, mask[:, None, None, :], scaling=scale, kv_prefix=prefix)
    assert products and set(products) == {torch.float32}
    monkeypatch.setattr(attention, "_float32_products", lambda device, dtype: False)
    widened, _ = cascade_attention(layer, query, own_k, own_v, mask[:, None, None, :], scaling=scale,
                                   kv_prefix=prefix)  # fmt: skip
    assert fast.dtype == widened.dtype == torch.bfloat16
    torch.testing.assert_close(fast.float(), widened.float(), atol=2e-2, rtol=2e-2)
