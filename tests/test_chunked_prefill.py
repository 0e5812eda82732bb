"""Chunked prefill: the same KV and logits as one call, for every policy; head-wise prefill moves exact bytes."""

from __future__ import annotations

import pytest
import torch

from engine.config import CacheConfig
from engine.context_plan import MAX_CHUNK, MIN_CHUNK, default_chunk
from engine.runner import prefill
from engine.search import SYSTEM_PROMPT
from tests.test_equivalence import QUESTION, SEARCH, assert_same_run, footprint_budget, search_trace


@pytest.mark.parametrize("model", ["tiny", "tiny_opt"])
@pytest.mark.parametrize("chunk", [1, 7, 16])
def test_chunks_give_the_kv_and_logits_of_one_call(request, model, chunk):
    loaded = request.getfixturevalue(model)
    prompt = loaded.encode_chat(QUESTION, system=SYSTEM_PROMPT)
    whole, logits = prefill(loaded.model, prompt, loaded.device)
    chunked, chunk_logits = prefill(loaded.model, prompt, loaded.device, chunk=chunk)
    torch.testing.assert_close(chunk_logits, logits, atol=1e-4, rtol=0)
    for a, b in zip(chunked.layers, whole.layers, strict=True):
        torch.testing.assert_close(a.keys, b.keys, atol=1e-4, rtol=0)
        torch.testing.assert_close(a.values, b.values, atol=1e-4, rtol=0)


@pytest.mark.parametrize(("policy", "candidates"), [("in_device", None), ("lbs", 1.3), ("headwise", 0.6)])
def test_a_chunked_search_equals_in_device_unchunked(tiny, policy, candidates):
    reference = search_trace(tiny, SEARCH, CacheConfig(policy="in_device", prefill_chunk=10_000))
    budget = footprint_budget(tiny, SEARCH, candidates) if candidates else None
    other = search_trace(tiny, SEARCH, CacheConfig(policy=policy, kv_budget_bytes=budget, prefill_chunk=7))
    assert_same_run(reference, other)


def test_headwise_prefill_loads_each_chunks_past_once_per_layer(tiny):
    """Chunk i attends to the i * c tokens before it, streamed head group by head group: h2d = sum of i * c KV_token;
    every prompt token goes to the host once."""
    chunk = 7
    events, _, _ = search_trace(
        tiny, SEARCH, CacheConfig(policy="headwise", kv_budget_bytes=1 << 30, prefill_chunk=chunk)
    )
    first = next(e for e in events if e.type == "transfer_stats")
    p = len(tiny.encode_chat(QUESTION, system=SYSTEM_PROMPT)) - 1
    token = tiny.kv_shape.token_bytes()
    assert first.h2d_bytes - first.step_h2d_bytes == sum(start * token for start in range(0, p, chunk))
    assert first.d2h_bytes - first.step_d2h_bytes == p * token


def test_default_chunk_is_sized_to_the_budget():
    act = 1000
    assert default_chunk(64 * 4 * act, act) == 64
    assert default_chunk(100 * 4 * act, act) == 64  # a power of two
    assert default_chunk(1, act) == MIN_CHUNK and default_chunk(1 << 50, act) == MAX_CHUNK


def test_a_bad_chunk_says_what_to_do():
    with pytest.raises(ValueError, match="prefill chunk must be at least 1 token"):
        CacheConfig(prefill_chunk=0)


def test_the_prompts_kv_is_stacked_for_its_blocks_letting_each_layer_go(tiny):
    """Writing the prompt's KV into blocks held it three times (the cache, each layer stacked, their stack); each
    layer now goes as it is copied, so it is on the device twice at most."""
    from engine.kv.prompt_kv import stacked_layers

    cache, _ = prefill(tiny.model, [5, 9, 14, 200, 31, 7, 40], tiny.device)
    want = torch.stack([torch.stack((layer.keys[0], layer.values[0])) for layer in cache.layers])
    assert torch.equal(stacked_layers(cache), want)
    assert all(layer.keys is None and layer.values is None for layer in cache.layers)


@pytest.mark.parametrize("chunk", [None, 32])
def test_an_automatic_budget_leaves_the_prefill_what_it_holds_beside_the_pool(tiny, chunk):
    """Read from free device memory, the budget is what is free less the margin and the prefill's reserve: the
    prompt's KV twice and one chunk's activations (the pool took the rest, and a long prompt ran out of memory
    in its prefill)."""
    from engine.context_plan import activation_token_bytes, prefill_reserve
    from engine.kv.cache import KVCache

    prompt_tokens, free, margin = 900, 50_000_000, 1_000_000
    kv = KVCache(tiny, SEARCH, CacheConfig(policy="lbs", prefill_chunk=chunk), prompt_tokens, decode=None,
                 prefill=None, free_bytes=lambda: free, margin=margin)  # fmt: skip
    act = activation_token_bytes(tiny.model.config, 4)
    used_chunk = chunk or default_chunk(free - margin, act)
    reserve = prefill_reserve(prompt_tokens, kv.store.token_bytes, act, used_chunk)
    assert reserve == 2 * prompt_tokens * kv.store.token_bytes + min(used_chunk, prompt_tokens) * act
    assert kv.budget == free - margin - reserve
    kv.close()
