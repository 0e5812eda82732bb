"""KV cache invariants over a real search: refcounts match the live tables (a candidate's own and its
speculative runs' `ahead` tables), pruning frees exactly the blocks no kept beam uses, and the store
holds tensors for exactly the live blocks."""

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


def tables(kv: KVCache) -> list[list[int]]:
    """Every block table that holds a reference: each live candidate's and each of its speculative runs'."""
    return [t for live in kv.live.values() for t in (live.table, *(a.table for a in live.ahead.values()))]


def check(kv: KVCache) -> None:
    refs = Counter(b for table in tables(kv) for b in table)
    assert set(kv.blocks.blocks) == set(refs), "a block outlived every table, or a table lost its block"
    assert all(kv.blocks.blocks[b].ref_count == n for b, n in refs.items())
    stored = {b for b in kv.blocks.blocks if kv.store.holds(b, Tier.DEVICE) or kv.store.holds(b, Tier.HOST)}
    assert stored == set(refs)
    assert kv.store.resident_bytes(Tier.DEVICE) + kv.store.resident_bytes(Tier.HOST) == len(refs) * kv.store.block_bytes


def make_cache(tiny, policy: str, search: SearchConfig, speculate: int = 0) -> tuple[KVCache, list[int]]:
    """A KV cache for the tiny model with the runner's decode (speculating up to `speculate` tokens a row)."""
    prompt = tiny.encode_chat("What is 2+3?", system=SYSTEM_PROMPT)
    budget = None if policy == "in_device" else 3 * (len(prompt) + 4 * search.step_tokens) * tiny.kv_shape.token_bytes()
    rules = StepRules(search.step_tokens, search.step_delimiter, frozenset(), 1.0, 1.0, tiny.decode,
                      tiny.context_length, speculate=speculate)  # fmt: skip
    kv = KVCache(
        tiny,
        search,
        CacheConfig(policy=policy, kv_budget_bytes=budget, speculative=speculate > 0),
        len(prompt),
        decode=lambda cache, mask, rows, stop, hook=None, **forward: decode_step(
            functools.partial(tiny.model, **forward), cache, mask, rows, rules, stop, hook
        ),
        prefill=lambda ids, **options: prefill(tiny.model, ids, tiny.device, **options)[0],
    )
    return kv, prompt


@pytest.mark.parametrize("policy", ["in_device", "lbs"])
def test_pruning_frees_exactly_what_no_kept_beam_uses(tiny, policy):
    kv, prompt = make_cache(tiny, policy, SEARCH)
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


SPECULATING = SearchConfig(beams=2, width=3, step_tokens=7, max_steps=4, step_delimiter="c")  # tiny-llama hits "c"


@pytest.mark.parametrize("policy", ["in_device", "lbs"])
def test_speculative_runs_hold_references_until_adopted_or_freed(tiny, policy):
    """Rows that end their step early keep KV for their children (`Live.ahead`): each run's table holds
    a reference to every block it reads, the child that adopts it takes the references over, a pruned
    candidate's runs are freed with it, and nothing is left at close."""
    kv, prompt = make_cache(tiny, policy, SPECULATING, speculate=SPECULATING.step_tokens)
    kv.prefill(prompt)
    next_id, kept, results, made, adopted = 1, [None], {}, 0, 0
    for _ in range(SPECULATING.max_steps):
        children, whole = [], set()
        for parent in kept:
            for index in range(SPECULATING.width if parent is not None else SPECULATING.candidates_per_step):
                tokens = kv.fork(parent, next_id, candidate_generator(0, next_id), adopt=index)
                adopted += len(tokens)
                if tokens and results[parent].aheads[index].done:  # the whole step was speculated
                    whole.add(next_id)
                children.append(next_id)
                next_id += 1
        for parent in kept:
            if parent is not None:
                kv.release(parent)
        check(kv)
        todo = [c for c in children if c not in whole]
        for done in kv.decode_step(todo, lambda: False, dict.fromkeys(todo, SPECULATING.width)):
            results.update(done.results)
        made += kv.timing.speculative_tokens
        check(kv)
        survivors = children[1 :: SPECULATING.width][: SPECULATING.beams]
        for c in set(children) - set(survivors):
            kv.release(c)
        check(kv)
        kept = survivors
    assert 0 < adopted < made, "the case must both adopt and discard speculated tokens"
    assert any(kv.live[c].ahead for c in kept), "kept candidates' runs must still hold blocks at close"
    kv.close()
    assert kv.blocks.blocks == {} and kv.store.resident_bytes(Tier.HOST) == kv.store.resident_bytes(Tier.DEVICE) == 0
    assert kv.store.pools[Tier.DEVICE].allocator.used == 0
