"""in_device's whole-search bound (issue 9): an upper bound of every real in_device peak over methods, lookahead,
speculation, block sizes and step delimiters, yet close to it, so that `auto` keeps the search on the device
whenever it fits instead of offloading it (engine/kv/sizing.py `whole_search_bytes`)."""

from __future__ import annotations

import random

import pytest

from benchmarks.gpu_ladder import WORKLOADS
from benchmarks.whole_bound import in_device_peak, previous_whole_bytes
from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.kv.sizing import auto_policy, one_candidate_bytes, search_kv_bytes
from engine.search import SYSTEM_PROMPT, run
from tests.test_equivalence import QUESTION


def sampled_shapes(count: int, seed: int) -> list[tuple[SearchConfig, CacheConfig]]:
    """Search and cache settings drawn at random (seeded): every method, lookahead roll-outs, speculation
    with one or more continuations, blocks larger and smaller than a step, fixed and delimiter-ended steps."""
    rng = random.Random(seed)
    shapes = []
    for _ in range(count):
        method = rng.choice(["beam", "beam", "dvts", "best-of-n", "greedy"])
        search = SearchConfig(
            beams=rng.randint(1, 4), width=rng.randint(1, 4), step_tokens=rng.choice([3, 6, 9, 16, 20, 33]),
            max_steps=rng.randint(1, 4), step_delimiter=rng.choice([None, " ", "c", "e"]), seed=rng.randint(0, 99),
            method=method, lookahead=rng.choice([0, 0, 1, 2, 3]) if method == "beam" else 0,
        )  # fmt: skip
        cache = CacheConfig(policy="in_device", speculative=rng.random() < 0.5, block_size=rng.choice([4, 16]),
                            speculative_continuations=rng.choice([1, 2, 4]))  # fmt: skip
        shapes.append((search, cache))
    return shapes


@pytest.mark.parametrize("search, cache", sampled_shapes(36, seed=11))
def test_in_device_runs_within_its_bound_without_a_refusal_or_a_retry(tiny, search, cache):
    """No budget (emulated): the pool is the bound, so a step that needs more is refused or retried."""
    prompt = len(tiny.encode_chat(QUESTION, system=SYSTEM_PROMPT))
    bound = search_kv_bytes(prompt, search, cache, tiny.kv_shape.token_bytes(), cascade=True)
    events = list(run(QUESTION, tiny, search, cache))
    assert events[-1].type == "run_finished", events[-1]
    assert not [e for e in events if isinstance(e, ev.GroupRetried)]
    snapshots = [e for e in events if isinstance(e, ev.MemorySnapshot)]
    assert snapshots and max(e.peak_device_bytes for e in snapshots) <= bound == snapshots[0].budget_bytes


def test_lookahead_roll_outs_are_counted_in_the_bound_not_as_more_steps(tiny):
    """Roll-outs fork every child and hold their chain of steps until scored: the bound counts them at rest,
    while kept paths stay the N a step keeps."""
    search = SearchConfig(beams=4, width=3, step_tokens=6, max_steps=3, lookahead=3, seed=0)
    cache = CacheConfig(policy="in_device", block_size=4)
    prompt = len(tiny.encode_chat(QUESTION, system=SYSTEM_PROMPT))
    token_bytes = tiny.kv_shape.token_bytes()
    plain = search_kv_bytes(prompt, SearchConfig(beams=4, width=3, step_tokens=6, max_steps=3), cache, token_bytes,
                            cascade=True)  # fmt: skip
    bound = search_kv_bytes(prompt, search, cache, token_bytes, cascade=True)
    assert bound > plain
    events = list(run(QUESTION, tiny, search, cache))
    assert events[-1].type == "run_finished", events[-1]
    assert max(e.peak_device_bytes for e in events if isinstance(e, ev.MemorySnapshot)) > plain


@pytest.mark.parametrize("search, cache", sampled_shapes(36, seed=11))
def test_the_bound_is_never_above_the_previous_one(tiny, search, cache):
    prompt = len(tiny.encode_chat(QUESTION, system=SYSTEM_PROMPT))
    token_bytes = tiny.kv_shape.token_bytes()
    now = search_kv_bytes(prompt, search, cache, token_bytes, cascade=True)
    assert now <= previous_whole_bytes(prompt, search, cache, token_bytes) or search.lookahead


def test_auto_keeps_the_issues_64_candidates_on_the_device_at_8_gb():
    """llama2-7b, 16 x 4, prompt 512, 128 tokens in steps of 32 (issue 9's workload): the whole search's KV peaks
    at 4.7 GB; the bound said 13.2 GB before, so at the issue's 8 GB budget `auto` offloaded it (lbs, 1.7x
    slower than in_device there). Now the bound is within 1.25x of that peak and `auto` picks in_device."""
    from app.model_facts import facts_of

    workload = WORKLOADS["w64"]
    search, cache = workload.search(), CacheConfig(block_size=workload.block_size)
    token_bytes = facts_of(workload.model, workload.dtype).kv_token_bytes
    bound = search_kv_bytes(workload.prompt_tokens, search, cache, token_bytes, cascade=True)
    before = previous_whole_bytes(workload.prompt_tokens, search, cache, token_bytes)
    one = one_candidate_bytes(workload.prompt_tokens, search, token_bytes, workload.block_size)
    assert auto_policy(before, one, 8 * 10**9) == "lbs"
    assert auto_policy(bound, one, 8 * 10**9) == "in_device"
    peak = in_device_peak(workload)  # plan-only: the real policy on meta tensors, its pool sized to the bound
    assert peak <= bound <= 1.25 * peak
