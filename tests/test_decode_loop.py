"""`decode_step`: a candidate's tokens do not depend on its batch or on how often the host syncs."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from engine.config import CacheConfig
from engine.kv.attention import arena_cache
from engine.rows import Row, RowResult, StepRules
from engine.runner import decode_step, prefill
from engine.sampling import candidate_generator
from tests.test_equivalence import SEARCH, UNEVEN, footprint_budget, search_trace

PROMPTS = {3: [5, 9, 14, 200, 31, 7], 5: [5, 9, 14, 200, 31, 7], 8: [40, 41, 42], 11: [300, 12, 9, 9, 100]}
PROMPTS |= {c: [7, 8, 9, c] for c in (13, 14, 15, 16)}


def group(loaded, candidates: list[int], seed: int = 0):
    """A left-padded group in an arena with room for 32 more tokens: (cache, mask [B, T], rows)."""
    kvs = [prefill(loaded.model, PROMPTS[c][:-1], loaded.device)[0] for c in candidates]
    width = max(len(PROMPTS[c]) - 1 for c in candidates)
    layers = []
    for layer in range(len(kvs[0].layers)):
        pair = []
        for part in ("keys", "values"):
            rows = [getattr(kv.layers[layer], part)[0] for kv in kvs]  # [H, t, D]
            pad = lambda x: torch.nn.functional.pad(x, (0, 0, width - x.shape[1], 32))  # noqa: E731
            pair.append(torch.stack([pad(r) for r in rows]))  # [B, H, T, D]
        layers.append(torch.stack(pair))
    mask = torch.zeros((len(candidates), width), dtype=torch.long)
    for i, c in enumerate(candidates):
        mask[i, width - (len(PROMPTS[c]) - 1) :] = 1
    rows = [Row(c, PROMPTS[c][-1], len(PROMPTS[c]) - 1, candidate_generator(seed, c)) for c in candidates]
    return arena_cache(loaded.model.config, torch.stack(layers), width), mask, rows


def rules_for(loaded, **changes) -> StepRules:
    rules = StepRules(12, None, frozenset(loaded.eos_token_ids), 0.9, 0.95, loaded.decode, loaded.context_length)
    return dataclasses.replace(rules, **changes)


def decode(loaded, candidates, rules, seed=0, **kwargs) -> dict[int, RowResult]:
    cache, mask, rows = group(loaded, candidates, seed)
    results, _ = decode_step(loaded.model, cache, mask, rows, rules, **kwargs)
    return dict(zip(candidates, results, strict=True))


class ForwardSpy:
    """Records each forward call's attention mask (None or its shape) through a pre-hook."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.masks: list[tuple[int, ...] | None] = []
        self.handle = model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, _module, _args, kwargs):
        mask = kwargs.get("attention_mask")
        self.masks.append(None if mask is None else tuple(mask.shape))

    def close(self) -> list[tuple[int, ...] | None]:
        self.handle.remove()
        return self.masks


def decode_watched(loaded, candidates, rules, drop_mask=False, **kwargs) -> tuple[dict[int, RowResult], list]:
    """`decode`, also returning each decode forward call's attention mask shape (None when no mask)."""
    cache, mask, rows = group(loaded, candidates)
    mask = None if drop_mask else mask
    spy = ForwardSpy(loaded.model)
    try:
        results, _ = decode_step(loaded.model, cache, mask, rows, rules, **kwargs)
    finally:
        masks = spy.close()
    return dict(zip(candidates, results, strict=True)), masks


def assert_same_results(got: RowResult, want: RowResult) -> None:
    assert (got.fed, got.sampled, got.finished, got.done) == (want.fed, want.sampled, want.finished, want.done)
    torch.testing.assert_close(torch.tensor(got.logprobs), torch.tensor(want.logprobs), atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.tensor(got.top1), torch.tensor(want.top1), atol=1e-5, rtol=0)


@pytest.mark.parametrize("batch", [[3, 8, 11], [11, 3], [8, 11, 3, 5]])
def test_a_candidate_samples_the_same_tokens_alone_or_in_any_batch(tiny, batch):
    rules = rules_for(tiny, temperature=1.0, top_p=1.0)
    together = decode(tiny, batch, rules)
    for c in batch:
        assert_same_results(together[c], decode(tiny, [c], rules)[c])
    if 5 in batch:  # same prompt, other candidate id: its own stream
        assert together[5].sampled != together[3].sampled


def test_same_seed_repeats_and_another_seed_differs(tiny):
    rules = rules_for(tiny)
    first, again, other = (decode(tiny, [3, 8], rules, seed=s) for s in (1, 1, 2))
    assert [r.sampled for r in first.values()] == [r.sampled for r in again.values()]
    assert [r.sampled for r in first.values()] != [r.sampled for r in other.values()]


def stop_reasons(results: dict[int, RowResult], rules: StepRules) -> set[str]:
    reasons = set()
    for r in results.values():
        if r.finished:
            reasons.add("eos")
        elif len(r.sampled) == rules.max_tokens:
            reasons.add("max_tokens")
        else:
            reasons.add("delimiter")
    return reasons


def test_sync_every_does_not_change_any_result(tiny):
    """EOS, the delimiter and max_tokens each end some row; every sync interval gives the same results."""
    eos = frozenset(range(2, 40))  # ~1 in 13 tokens ends a row
    rules = rules_for(tiny, max_tokens=11, delimiter=" ", eos_ids=eos, temperature=1.0, top_p=1.0)
    candidates = [3, 5, 8, 11, 13, 14, 15, 16]
    per_token = decode(tiny, candidates, rules, seed=2, sync_every=1)
    assert stop_reasons(per_token, rules) == {"eos", "delimiter", "max_tokens"}
    for sync_every in (3, 8, 64):
        batched = decode(tiny, candidates, rules, seed=2, sync_every=sync_every)
        for c in candidates:
            assert_same_results(batched[c], per_token[c])


def test_no_attention_mask_when_the_caller_gives_none(tiny):
    _, masks = decode_watched(tiny, [3, 5], rules_for(tiny, max_tokens=5), drop_mask=True)  # equal prompts
    assert masks == [None] * 5


@pytest.mark.parametrize(("policy", "candidates"), [("in_device", None), ("lbs", 1.2), ("layerwise", 4.2),
                                                    ("headwise", 100)])  # fmt: skip
def test_no_policy_gives_a_mask_to_rows_of_equal_length(tiny, policy, candidates):
    """The decode loop no longer reads a mask to see whether it has padding (a host sync a step on CUDA): each
    policy gives none when its rows are equal (fixed-length steps), so SDPA takes its fastest path, and one when
    they are not (in_device and lbs attend their rows' own columns by cascade, never by a mask)."""
    masks = {}
    for search in (SEARCH, UNEVEN):
        budget = footprint_budget(tiny, search, candidates) if candidates else None
        spy = ForwardSpy(tiny.model)
        try:
            search_trace(tiny, search, CacheConfig(policy=policy, kv_budget_bytes=budget))
        finally:
            masks[search.step_delimiter] = spy.close()
    assert set(masks[None]) == {None}
    padded = [mask for mask in masks[" "] if mask is not None]
    assert bool(padded) == (policy in ("layerwise", "headwise")), padded


def test_padded_rows_get_a_mask_growing_by_one_column_per_forward(tiny):
    """A 4D boolean mask `[B, 1, 1, T + j + 1]`: transformers takes it as it is, where a 2D one made it ask on every
    forward call whether any row was padded (a read of the device: a host sync per token on a GPU)."""
    _, masks = decode_watched(tiny, [3, 8], rules_for(tiny, max_tokens=5))  # prompts of 5 and 2 KV tokens
    assert masks == [(2, 1, 1, 5 + j + 1) for j in range(5)]


def test_forwards_stop_at_the_longest_possible_row_and_at_should_stop(tiny):
    results, masks = decode_watched(tiny, [3, 8], rules_for(tiny, max_tokens=5), sync_every=8)
    assert len(masks) == 5 and all(len(r.sampled) == 5 for r in results.values())

    calls = {"n": 0, "forwards": 0}

    def stop_after_three() -> bool:
        calls["n"] += 1
        return calls["n"] > 3

    def count_forward() -> None:
        calls["forwards"] += 1

    rules = rules_for(tiny, max_tokens=10)
    results = decode(tiny, [3, 8], rules, should_stop=stop_after_three, before_forward=count_forward, sync_every=8)
    assert calls == {"n": 4, "forwards": 3}
    assert all(len(r.sampled) == 3 and not r.done for r in results.values())
    full = decode(tiny, [3, 8], rules)
    assert all(results[c].sampled == full[c].sampled[:3] for c in (3, 8))


def test_observe_sees_host_float32_logits_of_unfinished_rows(tiny):
    seen = []
    rules = rules_for(tiny, max_tokens=4, observe=lambda c, logits, token: seen.append((c, logits, token)))
    results = decode(tiny, [3, 8], rules)
    assert [(c, t) for c, _, t in seen] == [(c, results[c].sampled[j]) for j in range(4) for c in (3, 8)]
    assert all(lg.device.type == "cpu" and lg.dtype == torch.float32 and lg.shape == (512,) for _, lg, _ in seen)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_top1_is_the_largest_probability_of_a_plain_softmax_of_the_observed_logits(tiny, temperature):
    """RKSC's confidence signal: each token's top-1 probability at temperature 1, whichever token was sampled."""
    seen: dict[int, list[torch.Tensor]] = {3: [], 8: []}
    rules = rules_for(tiny, max_tokens=6, temperature=temperature,
                      observe=lambda c, logits, token: seen[c].append(logits.clone()))
    results = decode(tiny, [3, 8], rules)
    for c in (3, 8):
        want = torch.stack([torch.softmax(lg, -1).max() for lg in seen[c]])
        torch.testing.assert_close(torch.tensor(results[c].top1), want, atol=1e-6, rtol=0)
        sampled = torch.tensor(results[c].logprobs).exp()
        assert (torch.tensor(results[c].top1) >= sampled - 1e-6).all()
        if temperature == 0:  # greedy samples the top token: its probability is the top-1 probability
            torch.testing.assert_close(sampled, want, atol=1e-6, rtol=0)
    if temperature > 0:  # sampling picked a token other than the top one somewhere
        assert any(t > math.exp(lp) + 1e-4 for c in (3, 8) for t, lp in zip(results[c].top1, results[c].logprobs,
                                                                                strict=True))
    unobserved = decode(tiny, [3, 8], dataclasses.replace(rules, observe=None))  # synced every 8 forwards
    for c in (3, 8):
        assert_same_results(results[c], unobserved[c])


def test_sync_every_below_one_is_refused(tiny):
    with pytest.raises(ValueError, match="sync_every"):
        decode(tiny, [3], rules_for(tiny), sync_every=0)


def test_forced_tokens_are_emitted_and_scored_under_the_model(tiny):
    """Teacher forcing (engine/replay.py): a forced candidate emits the given tokens whatever its draws."""
    rules = rules_for(tiny, temperature=1.0, top_p=1.0, max_tokens=6)
    reference = decode(tiny, [3, 8], rules, seed=1)
    forced = decode(tiny, [3, 8], dataclasses.replace(rules, forced={3: tuple(reference[3].sampled)}), seed=2)
    free = decode(tiny, [3, 8], rules, seed=2)
    assert_same_results(forced[3], reference[3])  # same tokens, so the same log-probs
    assert_same_results(forced[8], free[8])  # an unforced row samples from its own stream
    assert free[3].sampled != reference[3].sampled
