"""Drawn combinations of search shapes, methods, policies, switches and budgets (seeded), beyond the hand-picked
cases of the other tests: every policy gives in_device's tokens and logits (with speculation, the tokens and
logits it observes), and a budget refusal's "is enough for every step of this search" figure lets the same run
finish.

Logits agree to float32 rounding, not bit for bit (another batch composition sums in another order), so once in
a few hundred runs a draw falls on the boundary between two tokens and the sampled token differs where the
logits agree (seed 2's shape 41: 1.5e-7 apart at the flip). The sweep accepts that and nothing else: the logits
up to the flip must agree.

Some run with every test run; `pytest -m sweep tests/test_sweeps.py` runs 300 more (half a minute here). The
sweep found layer-wise failing on every run with lookahead (tests/test_layerwise_lookahead.py) and refusals
naming a budget that a later step refused again (tests/test_budget_refusals.py)."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from engine.config import CacheConfig, SearchConfig
from engine.search import run
from tests.test_equivalence import (
    QUESTION,
    assert_same_observed,
    assert_same_run,
    footprint_budget,
    observed_suffix,
    search_trace,
)


def drawn_search(rng: random.Random) -> SearchConfig:
    method = rng.choice(["beam", "beam", "dvts", "best-of-n", "greedy"])
    return SearchConfig(
        beams=rng.randint(1, 4), width=rng.randint(1, 3), step_tokens=rng.choice([3, 6, 12]),
        max_steps=rng.randint(1, 4), step_delimiter=rng.choice([None, " ", "e"]), seed=rng.randint(0, 99),
        method=method, lookahead=rng.choice([0, 0, 1, 2]) if method == "beam" else 0,
    )  # fmt: skip


def drawn_policies(count: int, seed: int) -> list[tuple[SearchConfig, CacheConfig, float | None]]:
    """(search, cache, candidates the budget holds, None: no budget) for a policy other than plain in_device."""
    rng, drawn = random.Random(seed), []
    for _ in range(count):
        search, policy = drawn_search(rng), rng.choice(["lbs", "lbs", "layerwise", "headwise", "in_device"])
        cache = CacheConfig(
            policy=policy, block_size=rng.choice([4, 16]), speculative=policy == "in_device" or rng.random() < 0.4,
            speculative_continuations=rng.choice([0, 1, 2]), inter_beam=rng.random() < 0.8,
            balanced_prefetch=rng.random() < 0.7, prefix_order=rng.random() < 0.7,
        )  # fmt: skip
        drawn.append((search, cache, None if policy == "in_device" else rng.choice([1.2, 2.5, 6, 100])))
    return drawn


def first_flip(reference, other) -> tuple[int, int] | None:
    """(candidate, token index) of the first sampled token that differs, candidates in the order they were made
    (a candidate's parent before it), or None. With speculation a candidate observes only its step's tokens
    after those its parent speculated, so each is compared with the end of the reference's."""
    for cid in sorted(other[1]):
        if cid not in reference[1] or other[2].get(cid) != reference[2].get(cid):
            return None  # a different tree before any token differed: not a flip
        observed = other[1][cid]
        suffix = observed_suffix(reference, cid, len(observed))
        for j, ((_, token), (_, expected)) in enumerate(zip(observed, suffix, strict=True)):
            if token != expected:
                return cid, j
    return None


def assert_same_or_a_rounding_flip(reference, other, speculative: bool) -> None:
    """The same run; or one that samples a different token where in_device's logits and its own agree (allclose):
    a draw that falls on the boundary between two tokens' probabilities, which a float32 rounding difference
    (another batch composition, attention split otherwise) moves. A KV read wrong would show in the logits
    first. Everything sampled after the flip may differ, so the comparison ends there."""
    try:
        (assert_same_observed if speculative else assert_same_run)(reference, other)
    except AssertionError:
        flip = first_flip(reference, other)
        if flip is None:
            raise
        cid, j = flip
        observed = other[1][cid]
        suffix = observed_suffix(reference, cid, len(observed))
        torch.testing.assert_close(torch.stack([lg for lg, _ in observed[: j + 1]]),
                                   torch.stack([lg for lg, _ in suffix[: j + 1]]), atol=1e-4, rtol=0)  # fmt: skip


def check_policy(tiny, search: SearchConfig, cache: CacheConfig, candidates: float | None) -> None:
    reference = search_trace(tiny, search, CacheConfig(policy="in_device", block_size=cache.block_size))
    budget = None if candidates is None else footprint_budget(tiny, search, candidates)
    try:
        other = search_trace(tiny, search, dataclasses.replace(cache, kv_budget_bytes=budget))
    except AssertionError as error:  # the run did not finish
        if "error='KVBudgetTooSmall'" in str(error):
            pytest.skip("the drawn budget is refused (tests/test_budget_refusals.py checks refusals)")
        raise
    assert_same_or_a_rounding_flip(reference, other, cache.speculative)


def with_sweep(every_run: list[tuple], sweep: list[tuple]) -> list:
    """The drawn cases that run with every test run, then the sweep's (marked: they run with -m sweep)."""
    return [*every_run, *(pytest.param(*case, marks=pytest.mark.sweep) for case in sweep)]


POLICIES = with_sweep(drawn_policies(30, seed=1), drawn_policies(200, seed=2))


@pytest.mark.parametrize("search, cache, candidates", POLICIES)
def test_a_drawn_policy_gives_in_devices_tokens_and_logits(tiny, search, cache, candidates):
    check_policy(tiny, search, cache, candidates)


def drawn_refusals(count: int, seed: int) -> list[tuple[SearchConfig, CacheConfig]]:
    """(search, cache) with a budget of 1 kB, which every policy refuses."""
    rng, drawn = random.Random(seed), []
    for _ in range(count):
        search, policy = drawn_search(rng), rng.choice(["lbs", "in_device", "layerwise"])
        cache = CacheConfig(policy=policy, block_size=rng.choice([4, 16]), speculative=rng.random() < 0.4,
                            kv_budget_bytes=1_000)  # fmt: skip
        drawn.append((search, cache))
    return drawn


REFUSALS = with_sweep(drawn_refusals(12, seed=1), drawn_refusals(100, seed=2))


@pytest.mark.parametrize("search, cache", REFUSALS)
def test_a_drawn_refusals_figure_lets_the_run_finish(tiny, refusals, search, cache):
    failed = list(run(QUESTION, tiny, search, cache))[-1]
    assert failed.type == "run_failed" and failed.error == "KVBudgetTooSmall", failed
    whole = refusals[-1].whole_bytes or refusals[-1].needed_bytes
    finished = list(run(QUESTION, tiny, search, dataclasses.replace(cache, kv_budget_bytes=whole)))[-1]
    assert finished.type == "run_finished", finished
