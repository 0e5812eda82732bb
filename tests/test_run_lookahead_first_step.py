"""With --lookahead and steps cut by length only, step 1's roll-outs are planned before the prefill too (README:
a budget whose first step cannot run is refused before the model reads the question). Before, only the prompt's
children were planned: a budget they fit but the roll-outs do not read the question, then failed in step 1."""

from __future__ import annotations

import dataclasses

import pytest

from engine.config import CacheConfig, SearchConfig
from engine.kv.cache import KVCache
from engine.search import run

PROMPT = [3 + i % 13 for i in range(600)]
SEARCH = SearchConfig(beams=2, width=2, step_tokens=8, max_steps=2, seed=0, lookahead=2, step_delimiter=None)
BUDGET = 485_000  # the tiny model's children of step 1 fit (479.3 kB), their roll-outs 2 steps on do not (491.6 kB)


@pytest.mark.parametrize(("policy", "budget"), [("lbs", BUDGET), ("layerwise", 1_260_000)])  # layerwise: 1.28 MB runs
def test_roll_outs_that_cannot_fit_are_refused_before_the_prefill(tiny, forwards, monkeypatch, policy: str,
                                                                  budget: int) -> None:
    cache = CacheConfig(policy=policy, kv_budget_bytes=budget, prefix_cache=False)
    events = list(run("", tiny, SEARCH, cache, prompt_ids=PROMPT))
    assert [e.type for e in events] == ["run_started", "run_failed"] and forwards[0] == 0  # the question not read
    monkeypatch.setattr(KVCache, "first_step_refusal", lambda self: None)  # found in the step itself, as the search
    late = list(run("", tiny, SEARCH, cache, prompt_ids=PROMPT))  # plans it: the same refusal, the same words
    assert [e.step for e in late if e.type == "step_started"] == [1]
    assert late[-1].type == "run_failed" and late[-1].message == events[-1].message


def test_a_budget_the_roll_outs_fit_is_read_and_run(tiny) -> None:
    cache = CacheConfig(policy="lbs", kv_budget_bytes=495_000, prefix_cache=False)
    assert list(run("", tiny, SEARCH, cache, prompt_ids=PROMPT))[-1].type == "run_finished"


def test_with_a_step_delimiter_only_the_children_are_planned(tiny) -> None:
    """A delimiter may end a child's step at any token: its roll-out's length is not known before the prefill."""
    search = dataclasses.replace(SEARCH, step_delimiter="\n\n")
    cache = CacheConfig(policy="lbs", kv_budget_bytes=BUDGET, prefix_cache=False)
    assert "prefill_done" in [e.type for e in run("", tiny, search, cache, prompt_ids=PROMPT)]
