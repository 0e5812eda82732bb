"""Every KV policy gives the same tokens and logits as in_device, and in_device matches plain transformers."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

from engine.config import CacheConfig, SearchConfig
from engine.search import SYSTEM_PROMPT, run

QUESTION = "What is 2+3?"


def search_trace(loaded, search: SearchConfig, cache: CacheConfig):
    """Run a search; return (events, per-candidate observed [(logits, token)], parent of each candidate)."""
    observed = defaultdict(list)
    events = list(
        run(
            QUESTION,
            loaded,
            search,
            cache,
            observe_logits=lambda cid, logits, token: observed[cid].append((logits.clone(), token)),
        )
    )
    assert events[-1].type == "run_finished", events[-1]
    parents = {e.id: e.parent for e in events if e.type == "candidate_scored"}
    return events, observed, parents


def path_of(cid, parents):
    path = []
    while cid is not None:
        path.append(cid)
        cid = parents[cid]
    return path[::-1]


def groups_per_step(events):
    return [e.groups for e in events if e.type == "transfer_stats"]


def assert_same_run(reference, other, atol=1e-4):
    _, ref_obs, ref_parents = reference
    _, obs, parents = other
    assert parents == ref_parents
    assert set(obs) == set(ref_obs)
    for cid in ref_obs:
        assert [t for _, t in obs[cid]] == [t for _, t in ref_obs[cid]], f"tokens of candidate {cid} differ"
        got = torch.stack([lg for lg, _ in obs[cid]])
        want = torch.stack([lg for lg, _ in ref_obs[cid]])
        torch.testing.assert_close(got, want, atol=atol, rtol=0)


def observed_suffix(reference, cid: int, count: int) -> list:
    """The reference's last `count` (logits, token) of candidate `cid`: with speculation a step started from its
    parent's speculated tokens observes only the rest of it."""
    observed = reference[1][cid]
    return observed[len(observed) - count :]


def assert_same_observed(reference, other) -> None:
    """The same tree and texts, and every token and logit `other` observed (it speculates) is the reference's."""
    assert other[2] == reference[2] and set(other[1]) <= set(reference[1])
    for cid, observed in other[1].items():
        suffix = observed_suffix(reference, cid, len(observed))
        assert [t for _, t in observed] == [t for _, t in suffix], f"tokens of candidate {cid} differ"
        torch.testing.assert_close(torch.stack([lg for lg, _ in observed]), torch.stack([lg for lg, _ in suffix]),
                                   atol=1e-4, rtol=0)  # fmt: skip
    texts = [{e.id: e.text for e in run[0] if e.type == "candidate_text"} for run in (reference, other)]
    assert texts[0] == texts[1]


SEARCH = SearchConfig(beams=2, width=3, step_tokens=6, max_steps=3, step_delimiter=None, seed=7)
UNEVEN = SearchConfig(beams=2, width=3, step_tokens=8, max_steps=3, step_delimiter=" ", seed=3)


def footprint_budget(loaded, search: SearchConfig, candidates: float) -> int:
    """A budget that holds about `candidates` candidates at the run's longest length."""
    prompt = len(loaded.encode_chat(QUESTION, system=SYSTEM_PROMPT))
    longest = prompt + (search.max_steps + 1) * search.step_tokens
    return int(candidates * longest * loaded.kv_shape.token_bytes())


def assert_matches_plain_transformers(loaded, trace) -> None:
    """Each candidate's observed logits equal one unbatched, uncached forward over prompt + its path's tokens."""
    _, observed, parents = trace
    prompt = loaded.encode_chat(QUESTION, system=SYSTEM_PROMPT)
    for cid in observed:
        steps = [observed[c] for c in path_of(cid, parents)]
        tokens = [t for step in steps for _, t in step]
        logits = torch.stack([lg for step in steps for lg, _ in step])
        with torch.inference_mode():
            ref = loaded.model(input_ids=torch.tensor([prompt + tokens])).logits[0].float()
        torch.testing.assert_close(logits, ref[len(prompt) - 1 : len(prompt) - 1 + len(tokens)], atol=1e-4, rtol=0)


@pytest.mark.parametrize("search", [SEARCH, UNEVEN], ids=["fixed-steps", "delimiter-steps"])
@pytest.mark.parametrize("model", ["tiny", "tiny_qwen2", "tiny_opt"])
def test_in_device_matches_plain_transformers(request, model, search):
    """Rows read the prompt in place and their parent's history from one copy per parent (cascade
    attention, three levels): each candidate's logits equal one uncached forward (GQA, MHA, OPT)."""
    loaded = request.getfixturevalue(model)
    assert_matches_plain_transformers(loaded, search_trace(loaded, search, CacheConfig(policy="in_device")))


SPECULATING = SearchConfig(beams=2, width=3, step_tokens=10, max_steps=3, step_delimiter="c", seed=0)


@pytest.mark.parametrize(("policy", "candidates"), [("in_device", None), ("lbs", 1.3)])
def test_speculation_keeps_tokens_and_logits(tiny, policy, candidates):
    """With speculation a first child starts from its parent's speculated tokens: its table is its
    siblings' plus blocks of its own, read from its own row after the parent level. Every token and
    every logit observed (tokens not speculated) is the one the run without speculation observed."""
    budget = footprint_budget(tiny, SPECULATING, candidates) if candidates else None
    off = search_trace(tiny, SPECULATING, CacheConfig(policy=policy, kv_budget_bytes=budget))
    on = search_trace(tiny, SPECULATING, CacheConfig(policy=policy, kv_budget_bytes=budget, speculative=True))
    assert_same_observed(off, on)
    assert sum(e.speculated for e in on[0] if e.type == "candidate_text") > 0


@pytest.mark.parametrize("search", [SEARCH, UNEVEN], ids=["fixed-steps", "delimiter-steps"])
@pytest.mark.parametrize(
    ("policy", "candidates", "inter_beam", "prefetch", "expect_groups"),
    [
        ("lbs", 100, True, True, "one"),
        ("lbs", 1.2, True, True, "two"),  # with inter-beam the prompt and each parent's history count once
        ("lbs", 1.1, True, True, "many"),
        ("lbs", 1.5, False, False, "many"),
        ("lbs", 3.2, False, True, "two"),
        ("lbs", 1.2, True, False, "two"),
        ("layerwise", 100, True, True, "one"),
        ("layerwise", 4.2, True, True, "one"),  # 3 layers: two staging layers fit, every layer streams
    ],
)
def test_policy_matches_in_device(tiny, search, policy, candidates, inter_beam, prefetch, expect_groups):
    reference = search_trace(tiny, search, CacheConfig(policy="in_device"))
    budget = footprint_budget(tiny, search, candidates)
    cache = CacheConfig(policy=policy, kv_budget_bytes=budget, inter_beam=inter_beam, balanced_prefetch=prefetch)
    other = search_trace(tiny, search, cache)
    assert_same_run(reference, other)
    groups = groups_per_step(other[0])
    if expect_groups == "one":
        assert groups == [1] * len(groups)
    elif expect_groups == "two":
        assert max(groups) == 2
    else:
        assert max(groups) >= 4


@pytest.mark.parametrize("model", ["tiny_qwen2", "tiny_opt"])
@pytest.mark.parametrize("policy", ["lbs", "layerwise"])
def test_other_architectures_match_in_device(request, model, policy):
    loaded = request.getfixturevalue(model)
    reference = search_trace(loaded, UNEVEN, CacheConfig(policy="in_device"))
    candidates = 1.5 if policy == "lbs" else 4.5  # 6 layers: 4 of them fit, so 2 stay resident and 4 stream
    budget = footprint_budget(loaded, UNEVEN, candidates)
    assert_same_run(reference, search_trace(loaded, UNEVEN, CacheConfig(policy=policy, kv_budget_bytes=budget)))


def test_lbs_device_residency_never_exceeds_budget(tiny):
    budget = footprint_budget(tiny, UNEVEN, 2.5)
    events, _, _ = search_trace(tiny, UNEVEN, CacheConfig(policy="lbs", kv_budget_bytes=budget))
    peaks = [e.peak_device_bytes for e in events if e.type == "memory_snapshot"]
    assert peaks and all(0 < p <= budget for p in peaks)


@pytest.mark.bundled
@pytest.mark.parametrize("policy", ["in_device", "lbs"])
def test_bundled_model_batched_decode_matches_plain_transformers(bundled, policy):
    search = SearchConfig(beams=2, width=2, step_tokens=6, max_steps=2, step_delimiter=None, seed=1)
    budget = footprint_budget(bundled, search, 2.5) if policy == "lbs" else None
    trace = search_trace(bundled, search, CacheConfig(policy=policy, kv_budget_bytes=budget))
    assert_matches_plain_transformers(bundled, trace)
