"""Device memory that runs out mid-step or shrinks between steps: smaller groups, same tokens, never a crash."""

from __future__ import annotations

import functools
from collections import defaultdict

import pytest
import torch

from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.kv.blocks import Tier
from engine.kv.cache import KVCache
from engine.rows import StepRules
from engine.runner import decode_step, prefill
from engine.sampling import candidate_generator
from engine.search import SYSTEM_PROMPT

SEARCH = SearchConfig(beams=2, width=3, step_tokens=5, max_steps=3, step_delimiter=None, seed=4)


def observed_rules(loaded, step_tokens: int):
    """(the prompt, what each candidate sampled with its logits, step rules that record them): fixed-length
    steps, no EOS, temperature 1."""
    prompt = loaded.encode_chat("What is 2+3?", system=SYSTEM_PROMPT)
    seen: dict[int, list[tuple[int, torch.Tensor]]] = defaultdict(list)
    rules = StepRules(
        step_tokens, None, frozenset(), 1.0, 1.0, loaded.decode, loaded.context_length,
        observe=lambda cid, scores, token: seen[cid].append((token, scores.detach().clone())),
    )  # fmt: skip
    return prompt, seen, rules

def run_cache(
    loaded, cache_config: CacheConfig, *, fail_above: int | None = None, free_bytes=None, margin=0, device_used=None,
    logits=None,
):  # fmt: skip
    """Drive a KV cache through a fixed tree (keep candidates 1 and 4 of each step); returns tokens, groups, events.
    `device_used`, a list: gets the device pool's used slots after each step; `logits`, a list: each sampled
    token's logits, in the order candidate by candidate."""
    prompt, seen, rules = observed_rules(loaded, SEARCH.step_tokens)

    def decode(cache, mask, rows, stop, hook=None, **forward):
        if fail_above is not None and len(rows) > fail_above:
            raise torch.OutOfMemoryError(f"injected: {len(rows)} rows do not fit")
        return decode_step(functools.partial(loaded.model, **forward), cache, mask, rows, rules, stop, hook)

    kv = KVCache(
        loaded, SEARCH, cache_config, len(prompt), decode=decode,
        prefill=lambda ids, **options: prefill(loaded.model, ids, loaded.device, **options)[0],
        free_bytes=free_bytes, margin=margin,
    )  # fmt: skip
    kv.prefill(prompt)
    groups, events, kept, next_id = [], [], [None], 1
    for step in range(1, SEARCH.max_steps + 1):
        children = []
        for parent in kept:
            for _ in range(SEARCH.width if parent is not None else SEARCH.candidates_per_step):
                kv.fork(parent, next_id, candidate_generator(SEARCH.seed, next_id))
                children.append(next_id)
                next_id += 1
        for parent in kept:
            if parent is not None:
                kv.release(parent)
        groups.append([done.group.candidates for done in kv.decode_step(children, lambda: False)])
        events += list(kv.step_events(step))
        if device_used is not None:
            device_used.append(kv.store.pools[Tier.DEVICE].allocator.used)
        kept = [children[0], children[3]]
        for c in set(children) - set(kept):
            kv.release(c)
    kv.close()
    if logits is not None:
        logits += [scores for cid in sorted(seen) for _, scores in seen[cid]]
    return {cid: [token for token, _ in pairs] for cid, pairs in seen.items()}, groups, events


def budget_for(loaded, candidates: float) -> int:
    prompt = len(loaded.encode_chat("What is 2+3?", system=SYSTEM_PROMPT))
    return int(candidates * (prompt + (SEARCH.max_steps + 1) * SEARCH.step_tokens) * loaded.kv_shape.token_bytes())


POLICIES = [CacheConfig(policy="in_device"), CacheConfig(policy="headwise", kv_budget_bytes=1 << 30)]


@pytest.mark.parametrize("cache", POLICIES, ids=lambda c: c.policy)
def test_out_of_memory_in_a_group_splits_it_and_gives_the_same_tokens(tiny, cache):
    reference_used, used, reference_logits, logits = [], [], [], []
    reference, _, _ = run_cache(tiny, cache, device_used=reference_used, logits=reference_logits)
    tokens, groups, events = run_cache(tiny, cache, fail_above=2, device_used=used, logits=logits)
    assert tokens == reference
    torch.testing.assert_close(logits, reference_logits, atol=1e-4, rtol=0)  # batch size changes the sums' order
    assert used == reference_used, "a retried step must give back every device slot it took"
    assert all(len(g) <= 2 for step in groups for g in step) and len(groups[0]) >= 3
    retried = [e for e in events if isinstance(e, ev.GroupRetried)]
    assert retried and "injected" in retried[0].reason
    assert sorted(c for step in groups[:1] for g in step for c in g) == list(range(1, 7))


def test_a_budget_that_shrinks_between_steps_gives_smaller_groups_and_the_same_tokens(tiny):
    budget = budget_for(tiny, 2.0)  # one group while the prompt and each parent's history count once
    cache = CacheConfig(policy="lbs", kv_budget_bytes=budget)
    reference, ref_groups, _ = run_cache(tiny, cache)
    probes = iter([None, None])  # steps 1 and 2 see no change; at step 3 another program takes memory
    tokens, groups, events = run_cache(tiny, cache, free_bytes=lambda: next(probes, 0), margin=budget * 2 // 5)
    assert tokens == reference
    assert len(ref_groups[2]) == 1 and len(groups[2]) > 1, "the shrunk pool must split the last step"
    budgets = [e.budget_bytes for e in events if isinstance(e, ev.MemorySnapshot)]
    assert budgets[0] == budget


@pytest.mark.parametrize("cache", POLICIES, ids=lambda c: c.policy)
def test_a_single_candidate_that_cannot_fit_is_an_error_not_a_loop(tiny, cache):
    try:
        run_cache(tiny, cache, fail_above=0)
    except torch.OutOfMemoryError as error:
        assert "injected" in str(error)
    else:
        raise AssertionError("a candidate that never fits must raise")
