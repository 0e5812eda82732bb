"""in_device's whole-search bound for a long question (engine/kv/sizing.py `working_tokens`): a one-step search
reads the prompt in place, so its bound counts the prompt once (a 3,000-token question's plan said 284.6 MB, twice
its need, and `auto` offloaded a search that fit); from step 2 on a step may stage a prefix that passes the
prompt's run, the prompt with it, beside the blocks at rest, so there the prompt counts twice, as a run holds it."""

from __future__ import annotations

import pytest

from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.kv.sizing import search_kv_bytes
from engine.search import run

PROMPT = [3 + i % 13 for i in range(1200)]  # a long question for the tiny model (context 2,048)
CACHE = CacheConfig(policy="in_device", block_size=16, prefix_cache=False)


def _peak(events) -> int:
    return max(e.peak_device_bytes for e in events if isinstance(e, ev.MemorySnapshot))


@pytest.mark.parametrize(("beams", "width", "method"), [(2, 2, "beam"), (1, 3, "beam"), (4, 1, "best-of-n")])
def test_a_one_step_search_counts_the_long_question_once_and_runs_within_it(tiny, beams, width, method):
    search = SearchConfig(beams=beams, width=width, step_tokens=8, max_steps=1, method=method, seed=1)
    token_bytes = tiny.kv_shape.token_bytes()
    bound = search_kv_bytes(len(PROMPT), search, CACHE, token_bytes, cascade=True)
    assert bound < 1.5 * len(PROMPT) * token_bytes  # it was over twice the question's KV
    events = list(run("", tiny, search, CACHE, prompt_ids=PROMPT))
    assert events[-1].type == "run_finished", events[-1]
    assert not [e for e in events if isinstance(e, ev.GroupRetried)]
    assert _peak(events) <= bound == events[0].kv_budget_bytes  # the pool is the bound: no more was needed


def test_a_later_step_may_stage_the_question_beside_its_blocks_so_longer_searches_count_it_twice(tiny):
    """One kept beam: step 2's rows all share its path past the prompt's run, so the load stages the prompt again."""
    search = SearchConfig(beams=1, width=3, step_tokens=8, max_steps=3, seed=1)
    token_bytes = tiny.kv_shape.token_bytes()
    bound = search_kv_bytes(len(PROMPT), search, CACHE, token_bytes, cascade=True)
    events = list(run("", tiny, search, CACHE, prompt_ids=PROMPT))
    assert events[-1].type == "run_finished", events[-1]
    assert 1.9 * len(PROMPT) * token_bytes < _peak(events) <= bound


def test_a_search_cut_to_one_step_by_the_context_still_counts_the_question_twice(tiny):
    """`within_context` cuts the steps to the room left (12 tokens: one step of 12), but a step the delimiter ends
    early leaves room for more, whose one kept path stages the prompt: the bound keeps room for that."""
    prompt = [3 + i % 13 for i in range(tiny.context_length - 12)]
    search = SearchConfig(beams=1, width=3, step_tokens=12, max_steps=4, seed=0, step_delimiter=" ")
    token_bytes = tiny.kv_shape.token_bytes()
    cut = SearchConfig(beams=1, width=3, step_tokens=12, max_steps=1, seed=0, step_delimiter=" ")
    bound = search_kv_bytes(len(prompt), cut, CACHE, token_bytes, cascade=True, steps_cut=True)
    assert bound > 1.9 * len(prompt) * token_bytes
    events = list(run("", tiny, search, CACHE, prompt_ids=prompt))
    assert events[-1].type == "run_finished", events[-1]
    assert len([e for e in events if e.type == "step_started"]) > 1  # more than the one step the cut counts
    assert _peak(events) <= events[0].kv_budget_bytes == bound
