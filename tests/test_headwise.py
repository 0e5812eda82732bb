"""Head-wise offloading (HeadInfer): the same tokens and logits as in_device, exact bytes, an adaptive head group."""

from __future__ import annotations

import math
import random

import pytest

from engine.config import CacheConfig, SearchConfig
from engine.errors import KVBudgetTooSmall
from engine.kv.cache import KVCache
from engine.kv.headwise import buffer_bytes, head_group_sizes
from engine.kv.headwise_traffic import HeadwiseTraffic, KVGeometry, headwise_traffic
from engine.kv.policy import Work
from engine.kv.sizing import search_kv_bytes
from engine.plan_only import planned_model
from engine.runner import prefill
from engine.sampling import candidate_generator
from engine.search import SYSTEM_PROMPT, run
from tests.test_equivalence import (
    QUESTION,
    SEARCH,
    UNEVEN,
    assert_same_run,
    footprint_budget,
    groups_per_step,
    search_trace,
)

FIXED = SearchConfig(beams=2, width=3, step_tokens=6, max_steps=3, step_delimiter=None, seed=3)  # no EOS in its runs


def stats(events):
    return [e for e in events if e.type == "transfer_stats"]


def prompt_kv_tokens(loaded) -> int:
    return len(loaded.encode_chat(QUESTION, system=SYSTEM_PROMPT)) - 1  # the last prompt token is fed at step 1


def prompt_run_tokens(loaded) -> int:
    """The prompt's run in whole blocks: a shared prefix that fills its run but for under a block is copied
    whole (the tail unread), one piece per layer and head group."""
    block = CacheConfig().block_size
    return -(-prompt_kv_tokens(loaded) // block) * block


@pytest.mark.parametrize(
    ("search", "candidates", "inter_beam", "expect_groups"),
    [
        (SEARCH, 100, True, "one"),
        (SEARCH, 0.6, True, "several"),
        (SEARCH, 0.8, False, "several"),
        (UNEVEN, 0.6, True, "several"),  # steps that end at a delimiter: rows padded to the longest
    ],
)
def test_headwise_matches_in_device(tiny, search, candidates, inter_beam, expect_groups):
    reference = search_trace(tiny, search, CacheConfig(policy="in_device"))
    budget = footprint_budget(tiny, search, candidates)
    other = search_trace(tiny, search, CacheConfig(policy="headwise", kv_budget_bytes=budget, inter_beam=inter_beam))
    assert_same_run(reference, other)
    groups = groups_per_step(other[0])
    assert max(groups) == 1 if expect_groups == "one" else max(groups) >= 2
    peaks = [e.peak_device_bytes for e in other[0] if e.type == "memory_snapshot"]
    assert peaks and all(0 < p <= budget for p in peaks)


@pytest.mark.parametrize("model", ["tiny_qwen2", "tiny_opt"])  # MHA (4 KV heads) and OPT; tiny-llama is GQA
def test_other_architectures_match_in_device(request, model):
    loaded = request.getfixturevalue(model)
    reference = search_trace(loaded, UNEVEN, CacheConfig(policy="in_device"))
    budget = footprint_budget(loaded, UNEVEN, 0.5)
    assert_same_run(reference, search_trace(loaded, UNEVEN, CacheConfig(policy="headwise", kv_budget_bytes=budget)))


def first_step_cache(loaded, budget: int, search: SearchConfig = FIXED) -> tuple[KVCache, list[int]]:
    """A KV cache after the prompt's prefill, with the first step's children forked."""
    prompt = loaded.encode_chat(QUESTION, system=SYSTEM_PROMPT)
    kv = KVCache(
        loaded, search, CacheConfig(policy="headwise", kv_budget_bytes=budget), len(prompt),
        decode=lambda *a, **k: None,
        prefill=lambda ids, **options: prefill(loaded.model, ids, loaded.device, **options)[0],
    )  # fmt: skip
    kv.prefill(prompt)
    children = list(range(1, search.candidates_per_step + 1))
    for child in children:
        kv.fork(None, child, candidate_generator(0, child))
    kv.release(0)
    return kv, children


def test_head_group_size_adapts_to_the_budget(tiny_qwen2):
    """4 KV heads: the group is 4, 2 or 1 heads, the largest whose two buffers fit; below one head it is an error."""
    assert head_group_sizes(4) == [4, 2, 1] and head_group_sizes(3) == [1] and head_group_sizes(32) == [8, 4, 2, 1]
    kv, children = first_step_cache(tiny_qwen2, 1 << 30)
    policy, n = kv.policy, len(children)
    work = [Work(c, tuple(kv.live[c].table), kv.blocks.num_tokens(kv.live[c].table)) for c in children]
    prompt, run_tokens = prompt_kv_tokens(tiny_qwen2), prompt_run_tokens(tiny_qwen2)
    assert run_tokens > prompt, "the prompt's last block is partial"
    slot = kv.store.block_bytes
    for heads in (4, 2, 1):
        need = buffer_bytes(heads, prompt, n, FIXED.step_tokens, policy.head_token_bytes) + slot
        assert policy.need(work, heads) == need  # the prompt is read in place once; each row holds its step
        whole = buffer_bytes(heads, run_tokens, n, FIXED.step_tokens, policy.head_token_bytes) + slot
        assert policy.need(work, heads, whole=True) == whole  # read with its run's tail: one piece per head group
        policy.plan(work, need)
        assert policy.whole == {tuple(children): False}, "the tail crosses only where the budget has room"
        policy.plan(work, whole)
        assert policy.whole == {tuple(children): heads > 1}, "one head a group is one piece without it"
        plan = policy.plan(work, need)
        assert len(plan.groups) == 1 and policy.heads[plan.groups[0].candidates] == heads
    one = policy.need(work[:1], 1)
    with pytest.raises(KVBudgetTooSmall, match="one KV head of one candidate"):
        policy.plan(work, one - 1)
    plan = policy.plan(work, one)  # every candidate alone, one head at a time
    assert len(plan.groups) == n and set(policy.heads.values()) == {1}
    kv.close()


def test_h2d_without_sharing_is_eq_3_with_no_layer_resident(tiny):
    """Inter-beam off, fixed steps: every forward loads every row's whole KV, head group by head group."""
    budget = footprint_budget(tiny, FIXED, 0.8)
    events = list(run(QUESTION, tiny, FIXED, CacheConfig(policy="headwise", kv_budget_bytes=budget, inter_beam=False)))
    assert events[-1].type == "run_finished" and max(groups_per_step(events)) >= 2
    token, n, p = tiny.kv_shape.token_bytes(), FIXED.candidates_per_step, prompt_kv_tokens(tiny)
    generated = FIXED.max_steps * FIXED.step_tokens
    steps = stats(events)
    assert sum(s.step_h2d_bytes for s in steps) == sum(n * (p + i) * token for i in range(generated))
    assert sum(s.step_d2h_bytes for s in steps) == n * generated * token  # each row's new token
    assert steps[-1].d2h_bytes - sum(s.step_d2h_bytes for s in steps) == p * token  # the prefill wrote the prompt once


def test_first_step_reads_the_prompt_once_per_forward(tiny):
    """Inter-beam on: step 1 forward j loads the prompt's run once and each row's j own tokens: (P + N j) KV_token,
    `P` the prompt's tokens in whole blocks (the partial last one's tail crosses too, unread)."""
    events = list(run(QUESTION, tiny, FIXED, CacheConfig(policy="headwise", kv_budget_bytes=1 << 30)))
    token, n, p, k = tiny.kv_shape.token_bytes(), FIXED.candidates_per_step, prompt_run_tokens(tiny), FIXED.step_tokens
    first = stats(events)[0]
    assert first.groups == 1
    assert first.step_h2d_bytes == sum((p + n * j) * token for j in range(k))
    assert first.step_d2h_bytes == n * k * token
    snapshot = next(e for e in events if e.type == "memory_snapshot")
    heads = tiny.kv_shape.num_kv_heads  # a large budget: one group of every head
    buffers = buffer_bytes(heads, p, n, k, token // (tiny.kv_shape.num_layers * heads))
    slot = CacheConfig().block_size * token
    assert snapshot.peak_device_bytes == -(-buffers // slot) * slot  # the two buffers, in whole slots


def test_plan_only_counts_the_bytes_of_a_real_run(tiny):
    """The shape-only model drives the same head-wise loads: a plan on meta tensors reports the real bytes."""
    prompt = list(range(3, 3 + 40))
    budget = 60_000
    real = list(run("", tiny, FIXED, CacheConfig(policy="headwise", kv_budget_bytes=budget), prompt_ids=prompt))
    plan = planned_model("synthetic:tiny-llama", "float32")
    planned = list(run("", plan, FIXED, CacheConfig(policy="headwise", kv_budget_bytes=budget), prompt_ids=prompt))
    assert real[-1].type == planned[-1].type == "run_finished"
    pick = lambda events: [(s.h2d_bytes, s.d2h_bytes, s.groups) for s in stats(events)]  # noqa: E731
    assert pick(planned) == pick(real)


def test_auto_picks_headwise_when_one_candidate_does_not_fit(tiny):
    """in_device when the whole search fits, lbs when one candidate does, headwise below that (was an error)."""
    prompt = len(tiny.encode_chat(QUESTION, system=SYSTEM_PROMPT))

    def chosen(candidates: float) -> str:
        budget = footprint_budget(tiny, FIXED, candidates)
        cache = CacheConfig(kv_budget_bytes=budget)
        return KVCache(tiny, FIXED, cache, prompt, decode=None, prefill=None).policy_name

    assert [chosen(100), chosen(2.5), chosen(0.6)] == ["in_device", "lbs", "headwise"]
    events = list(run(QUESTION, tiny, FIXED, CacheConfig(kv_budget_bytes=footprint_budget(tiny, FIXED, 0.6))))
    assert events[0].policy == "headwise" and events[-1].type == "run_finished"


def closed_form(loaded, search: SearchConfig, cache: CacheConfig) -> HeadwiseTraffic:
    prompt = len(loaded.encode_chat(QUESTION, system=SYSTEM_PROMPT))
    shape, token = loaded.kv_shape, loaded.kv_shape.token_bytes()
    whole = search_kv_bytes(prompt, search, cache, token, cascade=False)
    geometry = KVGeometry(shape.num_layers, shape.num_kv_heads, token)
    return headwise_traffic(geometry, prompt, search, cache, cache.kv_budget_bytes, whole)


def drawn_shape(seed: int) -> tuple[str, SearchConfig, float, bool]:
    """A model, a search of 2 to 4 kept beams (one: test_a_lone_beam_...), a budget in prompts' KV, sharing."""
    rng = random.Random(seed)
    search = SearchConfig(beams=rng.randint(2, 4), width=rng.randint(1, 3), step_tokens=rng.choice([4, 6, 8, 12]),
                          max_steps=rng.randint(2, 4), step_delimiter=None, seed=seed,
                          method=rng.choice(["beam", "best-of-n", "dvts", "greedy"]))
    prompts = math.exp(rng.uniform(math.log(0.15), math.log(2.5)))  # from under one head of the prompt to room
    return rng.choice(["tiny", "tiny_qwen2"]), search, prompts, rng.random() < 0.8


@pytest.mark.parametrize("seed", range(12))
def test_closed_form_is_every_step_of_a_run(request, monkeypatch, seed):
    """Drawn shapes, budgets and methods, steps at full length (no EOS): each step moves the closed form's bytes,
    or the run refuses its budget as the closed form does."""
    name, search, prompts, share = drawn_shape(seed)
    loaded = request.getfixturevalue(name)
    monkeypatch.setattr(loaded, "eos_token_ids", ())
    budget = int(prompts * len(loaded.encode_chat(QUESTION, system=SYSTEM_PROMPT)) * loaded.kv_shape.token_bytes())
    cache = CacheConfig(policy="headwise", kv_budget_bytes=budget, inter_beam=share, prefix_cache=False)
    events = list(run(QUESTION, loaded, search, cache))
    closed = closed_form(loaded, search, cache)
    assert list(closed.step_bytes) == [s.step_h2d_bytes + s.step_d2h_bytes for s in stats(events)]
    failed = next((e.message for e in events if e.type == "run_failed"), None)
    assert failed == (closed.refused and closed.refused.user_message())
    assert events[-1].type == ("run_failed" if failed else "run_finished")


def test_lookahead_roll_outs_move_what_later_steps_would(tiny, monkeypatch):
    """Roll-out `i` of step `s` decodes what step `s + i` would; the closed form counts each step with its
    roll-outs, as the run's per-step counters do."""
    monkeypatch.setattr(tiny, "eos_token_ids", ())
    search = SearchConfig(beams=2, width=2, step_tokens=6, max_steps=3, step_delimiter=None, lookahead=2)
    cache = CacheConfig(policy="headwise", kv_budget_bytes=150_000, prefix_cache=False)
    moved = [s.step_h2d_bytes + s.step_d2h_bytes for s in stats(run(QUESTION, tiny, search, cache))]
    closed = closed_form(tiny, search, cache)
    assert len(moved) == 3 and list(closed.step_bytes) == moved


def test_a_lone_beam_may_read_more_in_place(tiny_qwen2, monkeypatch):
    """One kept beam whose path wrote the prompt's partial block in place (the last of its siblings to write)
    reads it with the prompt: its children's steps move less than the closed form says, by under 10%."""
    monkeypatch.setattr(tiny_qwen2, "eos_token_ids", ())
    search = SearchConfig(beams=1, width=2, step_tokens=12, max_steps=4, step_delimiter=None, seed=85)
    cache = CacheConfig(policy="headwise", kv_budget_bytes=279_000, prefix_cache=False)
    moved = [s.step_h2d_bytes + s.step_d2h_bytes for s in stats(run(QUESTION, tiny_qwen2, search, cache))]
    closed = closed_form(tiny_qwen2, search, cache).step_bytes
    assert closed[0] == moved[0] and all(real < planned < 1.1 * real for real, planned in zip(moved[1:], closed[1:],
                                                                                               strict=True))
