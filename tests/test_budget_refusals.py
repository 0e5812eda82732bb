"""A KV budget too small is refused in the user's terms (engine/kv/cache.py `KVCache._refused`): the budget they
gave (not the whole slots the pool rounds it down to), the step's need in whole slots, and a budget under which
no later step is refused either, so that one raise of the budget is enough."""

from __future__ import annotations

import dataclasses

import pytest

from engine.config import CacheConfig, SearchConfig
from engine.search import run
from tests.test_equivalence import QUESTION
from tests.test_kv_spill import falling_free_memory

SEARCH = SearchConfig(beams=2, width=2, step_tokens=16, max_steps=4, step_delimiter=None, seed=3)
LOOKAHEAD = dataclasses.replace(SEARCH, lookahead=2, max_steps=3)


def last_event(tiny, search: SearchConfig, cache: CacheConfig):
    return list(run(QUESTION, tiny, search, cache))[-1]


@pytest.mark.parametrize(
    "policy, search",
    [("lbs", SEARCH), ("lbs", LOOKAHEAD), ("in_device", SEARCH), ("in_device", LOOKAHEAD), ("layerwise", SEARCH),
     ("layerwise", LOOKAHEAD)],
    ids=["lbs", "lbs-lookahead", "in_device", "in_device-lookahead", "layerwise", "layerwise-lookahead"],
)  # fmt: skip
def test_one_raise_to_the_figure_the_refusal_gives_is_enough(tiny, refusals, policy, search):
    slot = 16 * tiny.kv_shape.token_bytes()  # the default block of 16 tokens
    budget = 100_000  # not a whole number of slots: the pool uses 98,304 B of it
    failed = last_event(tiny, search, CacheConfig(policy=policy, kv_budget_bytes=budget))
    assert failed.type == "run_failed" and failed.error == "KVBudgetTooSmall", failed
    assert failed.message.startswith("KV budget 100.0 kB is too small for ")
    refused = refusals[-1]
    assert refused.budget_bytes == budget and refused.needed_bytes > budget
    whole = refused.whole_bytes
    assert whole is not None and whole > refused.needed_bytes
    assert "is enough for every step of this search" in failed.message
    if policy != "layerwise":  # its budget counts bytes of layers, not slots of the pool
        assert refused.needed_bytes % slot == 0 and whole % slot == 0
    finished = last_event(tiny, search, CacheConfig(policy=policy, kv_budget_bytes=whole))
    assert finished.type == "run_finished", finished


def test_in_device_that_cannot_hold_the_question_says_so_and_not_which_slots_ran_out(tiny, refusals):
    failed = last_event(tiny, SEARCH, CacheConfig(policy="in_device", kv_budget_bytes=20_000))
    assert failed.type == "run_failed" and failed.error == "KVBudgetTooSmall", failed
    assert "slots asked" not in failed.message
    assert "the question's KV needs" in failed.message and "pick lbs or auto" in failed.message
    assert refusals[-1].needed_for == "the question's KV" and refusals[-1].budget_bytes == 20_000


def test_headwise_names_the_budget_given_not_the_slots_it_rounds_to(tiny):
    failed = last_event(tiny, SEARCH, CacheConfig(policy="headwise", kv_budget_bytes=10_000))
    assert failed.type == "run_failed" and failed.error == "KVBudgetTooSmall", failed
    assert failed.message.startswith("KV budget 10.0 kB is too small for one KV head of the prompt (headwise)")


def test_a_budget_other_programs_took_part_of_is_named_with_what_was_usable(tiny, refusals, monkeypatch):
    falling_free_memory(monkeypatch, after_calls=3, left=0.35)
    failed = last_event(tiny, SEARCH, CacheConfig(policy="in_device"))
    assert failed.type == "run_failed" and failed.error == "KVBudgetTooSmall", failed
    assert "of it usable now: other programs hold device memory" in failed.message
    refused = refusals[-1]
    assert refused.usable_bytes < refused.budget_bytes


def test_with_a_verifier_keeping_kv_the_generators_share_is_named(tiny):
    search = dataclasses.replace(SEARCH, verifier="self-judge")
    # the set share leaves the generator 15 kB (the automatic one would refuse 150 kB for the verifier's path)
    failed = last_event(tiny, search, CacheConfig(policy="lbs", kv_budget_bytes=150_000, verifier_kv_share=0.9))
    assert failed.type == "run_failed" and failed.error == "KVBudgetTooSmall", failed
    assert failed.message.startswith("the generator's share of the KV budget 15.0 kB ")
    assert "--verifier-kv-share" in failed.message


@pytest.mark.parametrize("policy", ["auto", "in_device", "lbs", "layerwise", "headwise"])
@pytest.mark.parametrize("search", [SEARCH, dataclasses.replace(SEARCH, beams=5, lookahead=1, max_steps=2)],
                         ids=["beam", "lookahead"])
def test_with_no_budget_given_the_emulated_device_holds_a_long_questions_whole_search(tiny, policy, search):
    """No --kv-budget on the emulated device is a budget for the whole search under the policy asked for:
    layer-wise's rows hold the question in every layer, which its budget once fell short of (the window's
    layer-wise choice with its budget left on auto failed on a long question)."""
    prompt = list(range(3, 403))  # 400 tokens: the question's KV outweighs the steps'
    events = list(run(QUESTION, tiny, search, CacheConfig(policy=policy), prompt_ids=prompt))
    assert events[-1].type == "run_finished", events[-1]


@pytest.mark.parametrize("policy", ["auto", "in_device", "lbs", "layerwise", "headwise"])
@pytest.mark.parametrize("share", [0.05, 0.9])
def test_with_no_budget_given_the_emulated_device_holds_both_models_in_the_shares_set(tiny, policy, share):
    """No --kv-budget, but a verifier KV share: the automatic budget holds the generator's whole search in its
    part and one verification batch in the verifier's (a 5% share once refused a long question's PRM batch,
    a 90% one in_device's search)."""
    search = dataclasses.replace(SEARCH, beams=3, width=2, step_tokens=8, max_steps=3, verifier="prm",
                                 verifier_model="synthetic:tiny-qwen-prm")
    cache = CacheConfig(policy=policy, verifier_kv_share=share)
    events = list(run("y " * 300, tiny, search, cache))
    assert events[-1].type == "run_finished", events[-1]
    assert events[0].verifier_kv_budget_bytes > 0
