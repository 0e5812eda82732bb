"""The tokens a PRM's format adds around a step are counted at their most, first step and later ones alike:
RLHFlow's later step also closes the turn before it (23 tokens around a one-token step against the first's 13),
and the automatic share, counted from the first, refused a one-candidate search at a later step."""

from __future__ import annotations

import pytest
import torch

from engine.config import CacheConfig, SearchConfig
from engine.search import run
from engine.verifiers import StepToScore, make_verifier, prm_verifier
from engine.verifiers.path_kv import format_tokens
from engine.verifiers.synthetic_prm import synthetic_prm

QUESTION = "What is 2+3?"
PRM = "synthetic:tiny-rlhflow-prm"
STEP, STEPS = 8, 12
ONE_ROW = SearchConfig(beams=1, width=1, step_tokens=STEP, max_steps=STEPS, method="best-of-n", seed=0,
                       verifier="prm", verifier_model=PRM)


@pytest.mark.parametrize("name", ["tiny-rlhflow-prm", "tiny-math-shepherd", "tiny-qwen-prm", "tiny-skywork-prm"])
def test_the_tokens_around_a_step_are_the_most_any_step_adds(name):
    layout = prm_verifier(synthetic_prm(name, torch.device("cpu"), torch.float32)).layout
    around = [len(layout.body(QUESTION, ("1",) * k, "1")) for k in range(4)]
    assert format_tokens(layout, QUESTION)[1] == max(around)
    if name == "tiny-rlhflow-prm":
        assert around[1:] == [23] * 3 and around[0] == 13  # the case: a later step adds more than the first


def test_the_automatic_share_holds_every_step_of_a_path_whose_steps_read_k_tokens():
    """RLHFlow reading each of 12 steps in exactly k = 8 tokens (its own tokenizer: f = 1), in the share its
    batch_bytes gives one row: counted with the first step's 13 tokens around a step, step 8 did not fit."""
    verifier = prm_verifier(synthetic_prm("tiny-rlhflow-prm", torch.device("cpu"), torch.float32))
    step = "12345678"  # 8 tokens of this tokenizer, at every step
    assert verifier.reads_per_token == 1 and len(verifier.layout.body(QUESTION, ("1",), step)) == 23 - 1 + STEP
    share = verifier.batch_bytes(QUESTION, 1, STEP, STEPS)
    verifier.use_budget(share)
    previous: tuple[str, ...] = ()
    for _ in range(STEPS):
        item = StepToScore(QUESTION, previous, step, ())
        verifier.score([item])  # refused (KVBudgetTooSmall) when the share is short
        verifier.settle([item.key])
        previous = item.key[1:]
    assert len(verifier.path_ids(StepToScore(QUESTION, previous[:-1], step, ()))) > 20 + STEPS * (STEP + 13)


def test_rlhflows_automatic_share_holds_its_later_steps(tiny):
    """One candidate, 12 steps, the budget whose half is just the automatic share: it ran out at a later step."""
    verifier = make_verifier("prm", tiny, PRM)
    share = verifier.batch_bytes(QUESTION, 1, STEP, STEPS)
    cache = CacheConfig(policy="lbs", kv_budget_bytes=2 * share, speculative=True, prefix_cache=False)
    events = list(run(QUESTION, tiny, ONE_ROW, cache))
    assert events[-1].type == "run_finished", events[-1]
    assert events[0].verifier_kv_budget_bytes == share
    snapshots = [e for e in events if e.type == "memory_snapshot"]
    assert len(snapshots) == STEPS and all(s.verifier_peak_device_bytes <= share for s in snapshots)
