"""A KV budget whose first step cannot run is refused before the model reads the question (a 2,955-token question
was read for 11 s under lbs, then refused at step 1), in step 1's own words, and the run's start gives no "a step
may be refused" note for it: that note is for a budget whose first steps fit."""

from __future__ import annotations

import pytest

from app.cli import main
from engine.config import CacheConfig, SearchConfig
from engine.kv.cache import KVCache
from engine.search import run

PROMPT = [3 + i % 13 for i in range(600)]
SEARCH = SearchConfig(beams=2, width=2, step_tokens=8, max_steps=2, seed=0)




@pytest.mark.parametrize(("policy", "budget"), [("lbs", 200_000), ("layerwise", 600_000), ("in_device", 200_000),
                                                ("in_device", 520_000), ("headwise", 100_000)])
def test_a_first_step_that_cannot_fit_is_refused_before_the_prefill_in_its_own_words(tiny, forwards, monkeypatch,
                                                                                     policy, budget):
    cache = CacheConfig(policy=policy, kv_budget_bytes=budget, prefix_cache=False)
    events = list(run("", tiny, SEARCH, cache, prompt_ids=PROMPT))
    assert [e.type for e in events] == ["run_started", "run_failed"] and forwards[0] == 0  # the question not read
    assert events[0].every_step_kv_budget_bytes == 0  # no "may be refused" note: it is refused
    monkeypatch.setattr(KVCache, "first_step_refusal", lambda self: None)  # as before: found in the step itself
    late = list(run("", tiny, SEARCH, cache, prompt_ids=PROMPT))
    assert late[-1].type == "run_failed" and late[-1].message == events[-1].message
    assert [e.step for e in late if e.type == "step_started"] in ([], [1])  # the prompt's or step 1's refusal
    if budget == 520_000:  # the question's KV fits in_device's pool, its first step does not
        assert "this step needs" in late[-1].message


@pytest.mark.parametrize("policy", ["lbs", "layerwise", "in_device"])
def test_a_first_step_that_fits_is_read_and_run(tiny, policy):
    cache = CacheConfig(policy=policy, kv_budget_bytes=4_000_000, prefix_cache=False)
    events = list(run("", tiny, SEARCH, cache, prompt_ids=PROMPT))
    assert events[-1].type == "run_finished", events[-1]


def test_the_may_be_refused_note_is_only_for_a_first_step_that_fits(capsys):
    flags = ["--model", "synthetic:tiny-llama", "--device", "cpu", "--beams", "2", "--width", "2", "--max-steps",
             "2", "--step-tokens", "8", "--policy", "lbs", "--no-save", "--no-prefix-cache"]
    question = "The cat sat on the mat. " * 40
    assert main(["run", question, *flags, "--kv-budget", "60000"]) == 2
    out, err = capsys.readouterr()
    assert "may be refused" not in err and "too small for one candidate" in err
    assert "prompt:" not in out  # refused before the prefill
