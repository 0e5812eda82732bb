"""Verifier KV reuse: scoring only a candidate's new step over its parent's cached path gives the same
scores as rescoring the whole path, for every PRM family and self-judge, and costs fewer tokens."""

from __future__ import annotations

import pytest
import torch

from engine.config import CacheConfig, SearchConfig
from engine.search import run
from engine.verifiers import StepToScore, make_verifier, prm_verifier
from engine.verifiers.synthetic_prm import synthetic_prm

CPU = torch.device("cpu")
QUESTION = "Tom has 3 apples and buys 4 more. How many?"
CHILDREN = ("He buys 4.\n\n", "Three plus four.\n\n", "Add them: 3 + 4 = 7.\n\n")
PRMS = ("tiny-qwen-prm", "tiny-skywork-prm", "tiny-math-shepherd", "tiny-rlhflow-prm")


@pytest.fixture(params=[*PRMS, "self-judge"])
def verifier(request, tiny):
    if request.param == "self-judge":
        return make_verifier("self-judge", tiny)
    return prm_verifier(synthetic_prm(request.param, CPU, torch.float32))


@torch.inference_mode()
def full_rescore(verifier, item: StepToScore) -> float:
    """The whole path in one uncached forward, read at its last token."""
    ids = torch.tensor([verifier.path_ids(item)])
    hidden = verifier.body(input_ids=ids, use_cache=False).last_hidden_state[:, -1]  # [1, H]
    return float(verifier.readout(hidden)[0])


def three_steps(verifier):
    """Step 1 from the question, then two kept parents with three children each, then one more step."""
    first = [StepToScore(QUESTION, (), c, ()) for c in CHILDREN]
    steps = [(first, verifier.score(first))]
    verifier.settle([first[0].key, first[2].key])
    second = [StepToScore(QUESTION, (p,), c, ()) for p in (CHILDREN[0], CHILDREN[2]) for c in CHILDREN]
    steps.append((second, verifier.score(second)))
    verifier.settle([second[4].key])
    third = [StepToScore(QUESTION, (CHILDREN[2], CHILDREN[1]), c, ()) for c in CHILDREN[:2]]
    steps.append((third, verifier.score(third)))
    return steps


def test_reuse_equals_full_rescoring(verifier):
    for items, scores in three_steps(verifier):
        expected = [full_rescore(verifier, item) for item in items]
        assert scores == pytest.approx(expected, abs=1e-4)
        assert all(0 <= s <= 1 for s in scores)


def test_a_step_runs_only_the_new_tokens(verifier):
    first = [StepToScore(QUESTION, (), c, ()) for c in CHILDREN]
    verifier.score(first)
    verifier.settle([first[1].key])
    second = [StepToScore(QUESTION, (CHILDREN[1],), c, ()) for c in CHILDREN]
    verifier.score(second)
    cost = verifier.settle([])
    parent_length = len(verifier.path_ids(first[1])) - len(verifier.layout.probe(QUESTION))
    full = [len(verifier.path_ids(i)) for i in second]
    assert cost.tokens_full == sum(full)
    assert cost.tokens == sum(full) - 3 * parent_length


def test_a_missing_parent_is_rebuilt_not_guessed(verifier):
    """A path the verifier never saw (or let go) is computed from its longest cached ancestor."""
    item = StepToScore(QUESTION, CHILDREN[:2], CHILDREN[2], ())
    assert verifier.score([item]) == pytest.approx([full_rescore(verifier, item)], abs=1e-4)


def test_settle_keeps_only_the_kept_paths(verifier):
    first = [StepToScore(QUESTION, (), c, ()) for c in CHILDREN]
    verifier.score(first)
    verifier.settle([first[2].key])
    assert set(verifier.nodes) == {first[2].key}


@pytest.mark.parametrize("verifier_name", ["prm", "self-judge"])
def test_a_search_reports_verifier_tokens_with_and_without_reuse(tiny, verifier_name):
    search = SearchConfig(beams=2, width=2, step_tokens=6, max_steps=3, step_delimiter=None, seed=3,
                          verifier=verifier_name, verifier_model="synthetic:tiny-rlhflow-prm")
    events = list(run("What is 2+3?", tiny, search, CacheConfig()))
    assert events[-1].type == "run_finished", events[-1]
    selected = [e for e in events if e.type == "step_selected"]
    assert all(0 < e.verifier_tokens <= e.verifier_tokens_full for e in selected)
    assert selected[-1].verifier_tokens < selected[-1].verifier_tokens_full / 2
    if verifier_name == "prm":
        assert events[0].verifier == "RLHFlow PRM (synthetic:tiny-rlhflow-prm)"
        assert events[0].search["verifier_model"] == "synthetic:tiny-rlhflow-prm"


@pytest.mark.parametrize("name", PRMS)
def test_every_family_runs_a_search_on_a_different_tokenizer(tiny, name):
    search = SearchConfig(beams=2, width=2, step_tokens=4, max_steps=2, step_delimiter=None,
                          verifier="prm", verifier_model=f"synthetic:{name}")
    events = list(run("What is 2+3?", tiny, search, CacheConfig()))
    assert events[-1].type == "run_finished"
    assert len({e.score for e in events if e.type == "candidate_scored"}) > 1


def test_a_folder_that_is_not_a_prm_fails_the_run_with_one_clear_message(tiny, tmp_path):
    search = SearchConfig(verifier="prm", verifier_model=str(tmp_path))
    events = list(run("What is 2+3?", tiny, search, CacheConfig()))
    assert [e.type for e in events] == ["run_failed"]
    assert events[0].error == "NotAPRM" and "no config.json" in events[0].message


def test_the_prm_verifier_needs_a_model():
    with pytest.raises(ValueError, match="--verifier-model"):
        SearchConfig(verifier="prm")
