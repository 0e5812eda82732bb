"""KV cache invariants over a real search: refcounts match the live tables, pruning frees exactly
the blocks no kept beam uses, and the store holds tensors for exactly the live blocks."""

from __future__ import annotations

import functools
from collections import Counter

import pytest

from engine.config import CacheConfig, SearchConfig
from engine.kv.blocks import Tier
from engine.kv.cache import KVCache
from engine.rows import StepRules
from engine.runner import decode_step, prefill
from engine.sampling import candidate_generator
from engine.search import SYSTEM_PROMPT

SEARCH = SearchConfig(beams=2, width=3, step_tokens=7, max_steps=3, step_delimiter=None)


def check(kv: KVCache) -> None:
    refs = Counter(b for live in kv.live.values() for b in live.table)
    assert set(kv.blocks.blocks) == set(refs), "a block outlived every table, or a table lost its block"
    assert all(kv.blocks.blocks[b].ref_count == n for b, n in refs.items())
    stored = {b for b in kv.blocks.blocks if kv.store.holds(b, Tier.DEVICE) or kv.store.holds(b, Tier.HOST)}
    assert stored == set(refs)
    assert kv.store.resident_bytes(Tier.DEVICE) + kv.store.resident_bytes(Tier.HOST) == len(refs) * kv.store.block_bytes


@pytest.mark.parametrize("policy", ["in_device", "lbs"])
def test_pruning_frees_exactly_what_no_kept_beam_uses(tiny, policy):
    prompt = tiny.encode_chat("What is 2+3?", system=SYSTEM_PROMPT)
    budget = None if policy == "in_device" else 3 * (len(prompt) + 4 * SEARCH.step_tokens) * tiny.kv_shape.token_bytes()
    rules = StepRules(SEARCH.step_tokens, None, frozenset(), 1.0, 1.0, tiny.decode, tiny.context_length)
    kv = KVCache(
        tiny,
        SEARCH,
        CacheConfig(policy=policy, kv_budget_bytes=budget),
        len(prompt),
        decode=lambda cache, mask, rows, stop, hook=None, **forward: decode_step(
            functools.partial(tiny.model, **forward), cache, mask, rows, rules, stop, hook
        ),
        prefill=lambda ids, **options: prefill(tiny.model, ids, tiny.device, **options)[0],
    )
    kv.prefill(prompt)
    check(kv)
    next_id, kept = 1, [None]
    for _ in range(SEARCH.max_steps):
        children = []
        for parent in kept:
            for _ in range(SEARCH.width if parent is not None else SEARCH.candidates_per_step):
                kv.fork(parent, next_id, candidate_generator(0, next_id))
                children.append(next_id)
                next_id += 1
        for parent in kept:
            if parent is not None:
                kv.release(parent)
        check(kv)
        for _ in kv.decode_step(children, lambda: False):
            pass
        check(kv)
        survivors = children[1 :: SEARCH.width][: SEARCH.beams]  # keep beams from different parents
        kept_blocks = {b for c in survivors for b in kv.live[c].table}
        before = set(kv.blocks.blocks)
        for c in set(children) - set(survivors):
            kv.release(c)
        check(kv)
        assert before - set(kv.blocks.blocks) == before - kept_blocks  # freed: exactly what no kept beam uses
        kept = survivors
    kv.close()
    assert kv.blocks.blocks == {} and kv.store.resident_bytes(Tier.HOST) == kv.store.resident_bytes(Tier.DEVICE) == 0
    assert kv.store.pools[Tier.DEVICE].allocator.used == 0, "a group's working runs outlived the step"
