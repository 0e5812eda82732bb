"""The verifier's automatic KV share holds one path read in the most tokens its steps can be: a PRM on
another tokenizer that reads a step of k generator tokens in more than k is not refused at a late step."""

from __future__ import annotations

import random

import pytest

from engine.config import CacheConfig, SearchConfig
from engine.errors import format_bytes
from engine.kv.split import verifier_group_bytes
from engine.search import run
from engine.synthetic import synthetic_tokenizer
from engine.verifiers import make_verifier, reading
from engine.verifiers.pieces import step_text
from engine.verifiers.reading import most_tokens_per_token, reads_per_token
from engine.verifiers.synthetic_prm import family_tokenizer

QUESTION = "What is 2+3?"
PRM = "synthetic:tiny-math-shepherd"
STEP, STEPS = 24, 4
ONE_ROW = SearchConfig(beams=1, width=1, step_tokens=STEP, max_steps=STEPS, method="best-of-n", seed=0,
                       verifier="prm", verifier_model=PRM)


def one_row(tiny, budget: int, share: float | None = None) -> list:
    cache = CacheConfig(policy="lbs", kv_budget_bytes=budget, speculative=True, verifier_kv_share=share,
                        prefix_cache=False)
    return list(run(QUESTION, tiny, ONE_ROW, cache))


@pytest.mark.parametrize("family", ["math-shepherd", "qwen-prm", "rlhflow-prm", None])
def test_a_step_reads_in_no_more_tokens_than_the_bound(family):
    """Random steps of the generator's tokens (lone bytes among them) read in up to f tokens each."""
    generator = synthetic_tokenizer(512)
    verifier = family_tokenizer(family) if family else generator
    most = most_tokens_per_token(generator, verifier)
    draw = random.Random(0)
    reads = []
    for _ in range(200):
        text = step_text(generator.decode([draw.randrange(3, 512) for _ in range(STEP)], skip_special_tokens=True))
        reads.append(len(verifier.encode(text, add_special_tokens=False)))
    assert max(reads) <= STEP * most
    assert max(reads) > STEP  # the case the bound is for: more verifier tokens than generator tokens


def test_a_tokenizer_without_a_rust_backend_is_measured_alike_through_transformers_calls():
    """A slow (Python) tokenizer has no `backend_tokenizer`: the measure would have raised, a fault in Beamwise."""
    generator, prm = synthetic_tokenizer(512), family_tokenizer("math-shepherd")
    assert reading._slowly(generator, prm) == most_tokens_per_token(generator, prm)
    assert reading._slowly(generator, generator) == most_tokens_per_token(generator, generator)


def test_a_pair_is_measured_once_per_generator_tokenizer_and_verifier(monkeypatch):
    generator, prm = synthetic_tokenizer(512), family_tokenizer("math-shepherd")
    calls = []
    monkeypatch.setattr(reading, "most_tokens_per_token", lambda g, v: calls.append((g, v)) or len(calls))
    assert [reads_per_token(generator, prm, PRM) for _ in range(2)] == [1, 1]
    assert reads_per_token(generator, generator, "self-judge") == 2  # another verifier: measured
    assert reads_per_token(synthetic_tokenizer(512), prm, PRM) == 3  # another generator's tokenizer: measured
    assert calls[0] == (generator, prm) and len(calls) == 3


def test_an_automatic_share_holds_the_path_to_the_last_step(tiny):
    """A one-candidate search's group cannot be split: the share held k tokens a step and refused step 4."""
    events = one_row(tiny, 1_000_000)
    assert events[-1].type == "run_finished", events[-1]
    share = events[0].verifier_kv_budget_bytes
    snapshots = [e for e in events if e.type == "memory_snapshot"]
    assert len(snapshots) == STEPS and all(s.verifier_peak_device_bytes <= share for s in snapshots)
    verifier = make_verifier("prm", tiny, PRM)
    old = verifier_group_bytes(block_size=16, token_bytes=verifier.kv.token_bytes, rows=1, batch_size=8,
                               prefix=len(verifier.layout.prefix(QUESTION)),
                               per_step=len(verifier.layout.body(QUESTION, (), "1")), probe=0, step_tokens=STEP,
                               steps=STEPS)
    assert share > old and max(s.verifier_peak_device_bytes for s in snapshots) > old  # the old share was short


def test_a_budget_whose_half_cannot_hold_the_path_is_refused_before_the_first_step(tiny):
    verifier = make_verifier("prm", tiny, PRM)
    works = 2 * verifier.row_bytes(QUESTION, STEP, STEPS)
    events = one_row(tiny, works - 1)
    assert [e.type for e in events] == ["run_failed"]
    assert f"the smallest budget that works is {format_bytes(works)}" in events[0].message
    assert "--verifier-kv-share" in events[0].message
    assert one_row(tiny, works)[-1].type == "run_finished"


def test_a_share_the_user_set_is_kept_and_a_row_it_cannot_hold_refused_when_it_comes(tiny):
    events = one_row(tiny, 1_000_000, share=0.08)
    assert events[0].verifier_kv_budget_bytes == 80_000
    assert events[-1].type == "run_failed" and "the verifier's KV share 80.0 kB is too small" in events[-1].message
    assert any(e.type == "memory_snapshot" for e in events)  # steps ran before the row that did not fit
