"""Layer-wise under memory faults: an out-of-memory step retried with fewer resident layers, a budget that
shrinks and grows between steps, and device buffers that come from the one pool (issue 9)."""

from __future__ import annotations

import functools
import itertools

import pytest
import torch

from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.kv import layer_budget, layerwise
from engine.kv.blocks import Tier
from engine.kv.cache import KVCache
from engine.kv.pool import PoolExhausted, SlotPool
from engine.runner import decode_step, prefill
from engine.sampling import candidate_generator
from tests.test_kv_faults import observed_rules

SEARCH = SearchConfig(beams=2, width=3, step_tokens=5, max_steps=3, step_delimiter=None, seed=4)
ROWS = SEARCH.candidates_per_step
LAYERWISE = CacheConfig(policy="layerwise", kv_budget_bytes=1 << 30)  # every layer fits, until told otherwise
MARGIN = 1 << 40  # the activation margin of a run whose free memory a test sets


def drive(loaded, cache_config: CacheConfig, *, fault=None, budget_at=None, after_step=None):
    """Drive a KV cache through a fixed tree (keep candidates 1 and 4 of each step), as tests/test_kv_faults.py
    does. `fault(step, forward)` runs after the policy's hook before each forward call of every attempt and
    may raise; what a failed attempt observed is dropped. `budget_at[step](kv)`: the working budget other
    programs leave at that step (through the free-memory probe). `after_step(step, kv)` looks at the cache.
    Returns tokens and logits by candidate, and the events."""
    prompt, seen, rules = observed_rules(loaded, SEARCH.step_tokens)
    now = {"step": 0}

    def decode(cache, mask, rows, stop, hook=None, **forward):
        marks = {cid: len(pairs) for cid, pairs in seen.items()}
        calls = itertools.count()

        def before_forward():
            if hook is not None:
                hook()
            if fault is not None:
                fault(now["step"], next(calls))

        try:
            model = functools.partial(loaded.model, **forward)
            return decode_step(model, cache, mask, rows, rules, stop, before_forward)
        except BaseException:
            for cid in seen:
                del seen[cid][marks.get(cid, 0) :]
            raise

    def free_bytes():
        if budget_at is None or now["step"] not in budget_at:
            return None
        usable = kv.store.device_capacity_bytes - kv.layer_overhead
        return MARGIN - (usable - budget_at[now["step"]](kv))

    kv = KVCache(
        loaded, SEARCH, cache_config, len(prompt), decode=decode,
        prefill=lambda ids, **options: prefill(loaded.model, ids, loaded.device, **options)[0],
        free_bytes=free_bytes, margin=MARGIN,
    )  # fmt: skip
    kv.prefill(prompt)
    events, kept, next_id = [], [None], 1
    try:
        for step in range(1, SEARCH.max_steps + 1):
            now["step"] = step
            children = []
            for parent in kept:
                for _ in range(SEARCH.width if parent is not None else ROWS):
                    kv.fork(parent, next_id, candidate_generator(SEARCH.seed, next_id))
                    children.append(next_id)
                    next_id += 1
            for parent in kept:
                if parent is not None:
                    kv.release(parent)
            list(kv.decode_step(children, lambda: False))
            events += list(kv.step_events(step))
            if after_step is not None:
                after_step(step, kv)
            kept = [children[0], children[3]]
            for c in set(children) - set(kept):
                kv.release(c)
    finally:
        kv.close()
    tokens = {cid: [token for token, _ in pairs] for cid, pairs in seen.items()}
    logits = [scores for cid in sorted(seen) for _, scores in seen[cid]]
    return tokens, logits, events


def layers_of(kv: KVCache) -> list[int]:
    """The device pool's slots in use, each resident layer's run, and no staging left after a step."""
    policy = kv.policy
    assert policy.staging_run is None and not policy.staging
    runs = [layer.run for layer in policy.layers]
    assert all(run is not None for run in runs[: policy.resident])
    assert all(run is None for run in runs[policy.resident :])
    assert kv.store.pools[Tier.DEVICE].allocator.used == sum(run.length for run in runs[: policy.resident])
    return policy.resident


def fail_once(at_step: int, at_forward: int):
    """A fault that raises a CUDA out-of-memory error once, at that forward call of that step."""
    fired = []

    def fault(step, forward):
        if (step, forward) == (at_step, at_forward) and not fired:
            fired.append(step)
            raise torch.OutOfMemoryError("injected: CUDA out of memory")

    return fault


def retries(events) -> list[ev.GroupRetried]:
    return [e for e in events if isinstance(e, ev.GroupRetried)]


@pytest.mark.parametrize(
    ("resident", "layers", "lowered"),
    [(6, 6, 3), (3, 6, 1), (1, 6, 0), (0, 6, None), (5, 6, 2), (32, 32, 16), (3, 3, 0), (2, 2, None), (1, 1, None)],
)
def test_a_retry_keeps_half_the_resident_layers_and_fewer_device_bytes(resident, layers, lowered):
    """From every layer resident, streaming adds two staging layers: 3 layers of 3 can only go to none."""
    assert layer_budget.lowered_residency(resident, layers) == lowered


@pytest.fixture(scope="module")
def reference(tiny_qwen2):
    tokens, logits, _ = drive(tiny_qwen2, CacheConfig(policy="in_device"))
    return tokens, logits


@pytest.mark.parametrize("forward", [0, 3], ids=["first-forward", "mid-step"])
def test_out_of_memory_in_a_step_retries_it_with_half_the_resident_layers(tiny_qwen2, reference, forward):
    resident = {}
    tokens, logits, events = drive(
        tiny_qwen2, LAYERWISE, fault=fail_once(2, forward), after_step=lambda s, kv: resident.update({s: layers_of(kv)})
    )
    assert tokens == reference[0]
    torch.testing.assert_close(logits, reference[1], atol=1e-4, rtol=0)  # batch composition changes the sums
    (retried,) = retries(events)
    assert retried.step == 2 and len(retried.candidates) == ROWS
    assert retried.reason.startswith("resident layers 6 -> 3") and "injected" in retried.reason
    # the lowered budget holds for the rest of the step (Eq. 1 keeps fewer layers as the KV grows: 3, then 2);
    # the next step re-reads the budget and every layer comes back
    assert resident == {1: 6, 2: 2, 3: 6}


def test_a_retried_step_moves_what_the_lowered_budget_moves(tiny_qwen2):
    """Exact bytes: failing before any copy, the retry streams what a run whose budget was that low from the
    step's start streams (the same evictions, the same per-token loads and write-backs), and the next step
    brings the layers back as that run does."""
    _, _, faulted = drive(tiny_qwen2, LAYERWISE, fault=fail_once(2, 0))
    lowered = {2: lambda kv: (3 + layer_budget.STAGING_LAYERS) * kv.policy.layer_bytes(ROWS)}
    _, _, shrunk = drive(tiny_qwen2, LAYERWISE, budget_at=lowered)
    assert len(retries(faulted)) == 1 and not retries(shrunk)
    traffic = lambda events: [(e.step_h2d_bytes, e.step_d2h_bytes) for e in events if isinstance(e, ev.TransferStats)]  # noqa: E731
    assert traffic(faulted) == traffic(shrunk)
    assert traffic(faulted)[1][0] > 0 == traffic(faulted)[0][0]


def test_a_step_that_fails_with_no_layer_resident_raises_after_lowering_to_none(tiny_qwen2):
    attempts = []

    def always(step, forward):
        attempts.append(step)
        raise torch.OutOfMemoryError("injected: never fits")

    with pytest.raises(torch.OutOfMemoryError, match="never fits"):
        drive(tiny_qwen2, LAYERWISE, fault=always)
    assert len(attempts) == 4, "6 -> 3 -> 1 -> 0 resident layers, then the error"


def test_a_budget_that_shrinks_between_steps_moves_layers_to_the_host_and_back(tiny_qwen2, reference):
    resident = {}
    two_layers = {2: lambda kv: (2 + layer_budget.STAGING_LAYERS) * kv.policy.layer_bytes(ROWS)}
    tokens, logits, events = drive(
        tiny_qwen2, LAYERWISE, budget_at=two_layers, after_step=lambda s, kv: resident.update({s: layers_of(kv)})
    )
    assert tokens == reference[0]
    torch.testing.assert_close(logits, reference[1], atol=1e-4, rtol=0)
    assert resident == {1: 6, 2: 1, 3: 6}  # 2 at the step's start, 1 once the KV grew past the budget's four layers
    stats = [e for e in events if isinstance(e, ev.TransferStats)]
    assert stats[0].step_h2d_bytes == 0 < stats[1].step_h2d_bytes and not retries(events)


def test_rows_that_find_no_room_in_the_pool_are_selected_on_the_host(tiny_qwen2, reference, monkeypatch):
    """The pool refuses layer 4's new rows at step 2 (fragmented, or limited): that layer and the ones after
    it are selected on the host, and the step says so; Eq. 1 still wants them, so they come back at the
    first forward call that finds room (here at once)."""
    buffer, refused = layerwise.LayerwisePolicy._buffer, []

    def refusing(policy, rows, on_device, like, spares, from_end=False):
        if on_device and not refused and policy.rows[0] != 0 and policy.layers[4].kv is like:
            refused.append(True)
            raise PoolExhausted("injected: no run that long")
        return buffer(policy, rows, on_device, like, spares, from_end)

    monkeypatch.setattr(layerwise.LayerwisePolicy, "_buffer", refusing)
    resident = {}
    tokens, _, events = drive(tiny_qwen2, LAYERWISE, after_step=lambda s, kv: resident.update({s: layers_of(kv)}))
    assert refused and tokens == reference[0]
    (retried,) = retries(events)
    assert retried.step == 2 and retried.reason.startswith("resident layers 6 -> 4 (no room to select rows")
    assert resident == {1: 6, 2: 6, 3: 6}
    step2 = [e for e in events if isinstance(e, ev.TransferStats)][1]
    assert step2.step_h2d_bytes == step2.step_d2h_bytes > 0, "two layers out at the old rows, back at the new"


def test_no_step_after_the_first_allocates_device_kv(tiny_qwen2, monkeypatch):
    """Layer and staging buffers are runs of the device pool, allocated once: after step 1 no torch.empty
    makes a buffer of a step's device shape, the pool never grows, and every device buffer lies in it."""
    empty, made, chunks = torch.empty, [], []
    monkeypatch.setattr(torch, "empty", lambda *a, **k: made.append(tuple(empty(*a, **k).shape)) or empty(*a, **k))
    add_chunk = SlotPool._add_chunk
    monkeypatch.setattr(SlotPool, "_add_chunk", lambda pool, slots: chunks.append(slots) or add_chunk(pool, slots))
    streamed = {2: lambda kv: (1 + layer_budget.STAGING_LAYERS) * kv.policy.layer_bytes(ROWS)}
    shapes, inside = [], []

    def look(step, kv):
        policy, pool = kv.policy, kv.store.pools[Tier.DEVICE]
        base = pool._chunks[0]
        start, end = base.data_ptr(), base.data_ptr() + base.numel() * base.element_size()
        inside.extend(start <= layer.kv.data_ptr() < end for layer in policy.layers[: policy.resident])
        shapes.append((policy.capacity, *policy.layers[0].kv.shape[1:]))
        if step == 1:
            made.clear()

    drive(tiny_qwen2, LAYERWISE, budget_at=streamed, after_step=look)
    assert len(chunks) == 1, "the device pool is allocated once (the host pool grows on its own)"
    assert all(inside) and len(inside) == 6 + 0 + 6  # step 2 ends streaming every layer through the staging
    assert not set(made) & set(shapes[1:]), "a device layer or staging buffer was allocated outside the pool"


def test_out_of_memory_inside_a_layer_while_streaming_leaves_no_trace(tiny_qwen2, reference, monkeypatch):
    """The error comes from layer 3's update in the middle of a forward call while layers stream (some layers
    already hold the token, a load is in flight): the rewound step gives the same tokens, and each later
    step finds every row's KV intact."""
    update, calls = layerwise.LayerwisePolicy.update, []

    def failing(policy, layer, key_states, value_states):
        calls.append(layer.index)
        if len(calls) == 6 * 2 + 4 and policy.resident < policy.num_layers:  # forward 2 of the step, layer 3
            raise torch.OutOfMemoryError("injected: attention workspace")
        return update(policy, layer, key_states, value_states)

    monkeypatch.setattr(layerwise.LayerwisePolicy, "update", failing)
    five = {2: lambda kv: (4 + layer_budget.STAGING_LAYERS) * kv.policy.layer_bytes(ROWS)}
    resident = {}

    def after(step, kv):
        resident[step] = layers_of(kv)
        calls.clear()  # count the next step's updates from its start

    tokens, logits, events = drive(tiny_qwen2, LAYERWISE, budget_at=five, after_step=after)
    assert tokens == reference[0]
    torch.testing.assert_close(logits, reference[1], atol=1e-4, rtol=0)
    (retried,) = retries(events)
    assert retried.step == 2 and retried.reason.startswith("resident layers 3 -> 1")  # 4 at the start, 3 by then
    assert resident[3] == 6


def test_rows_are_selected_with_the_parent_index_copied_to_the_device_without_blocking(tiny_qwen2, reference,
                                                                                        monkeypatch):
    """Selecting a step's rows copied the parents' index from the host with a blocking `.to` for every layer and
    for the mask (on CUDA a host stall each); it now goes to the device once a step, without blocking
    (engine/kv/streams.py `device_tensor`), and host layers read the host index. Tokens stay in_device's."""
    select, to, selected, inside, blocking = layerwise.LayerwisePolicy._select_rows, torch.Tensor.to, [], [], []

    def selecting(policy, *args):
        selected.append(policy.resident)
        inside.append(True)
        try:
            return select(policy, *args)
        finally:
            inside.pop()

    def watched(tensor, *args, **kwargs):
        if inside and not kwargs.get("non_blocking"):
            blocking.append(args)
        return to(tensor, *args, **kwargs)

    monkeypatch.setattr(layerwise.LayerwisePolicy, "_select_rows", selecting)
    monkeypatch.setattr(torch.Tensor, "to", watched)
    two_layers = {2: lambda kv: (2 + layer_budget.STAGING_LAYERS) * kv.policy.layer_bytes(ROWS)}
    tokens, logits, _ = drive(tiny_qwen2, LAYERWISE, budget_at=two_layers)
    assert tokens == reference[0]
    torch.testing.assert_close(logits, reference[1], atol=1e-4, rtol=0)
    assert len(selected) == 3 and 0 < min(selected) < 6, "rows selected each step, with layers on both tiers"
    assert blocking == []
