"""Prefix-aware order carries a group's placed blocks to the next group (issue 14): a block both need is
copied on the device instead of crossing PCIe again; same tokens and logits, never more H2D, no run leaked."""

from __future__ import annotations

import pytest
import torch

from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.kv.groups import GroupExecutor
from tests.test_equivalence import assert_same_run, footprint_budget, search_trace
from tests.test_kv_faults import budget_for, run_cache

# 4 x 4 with a budget of 1.6 candidates: steps 3 and 4 run in two groups whose families share history
# beyond the groups' common prefix (the second group's parent level holds blocks the first one placed).
SHARING = SearchConfig(beams=4, width=4, step_tokens=6, max_steps=4, step_delimiter=None, seed=1)
SWEEP = [
    (SHARING, 1.6),
    (SHARING, 1.2),
    (SearchConfig(beams=3, width=4, step_tokens=6, max_steps=4, step_delimiter=None, seed=2), 1.2),
    (SearchConfig(beams=4, width=4, step_tokens=16, max_steps=3, step_delimiter=None, seed=3), 1.3),
    (SearchConfig(beams=2, width=3, step_tokens=8, max_steps=3, step_delimiter=" ", seed=3), 1.2),
]


@pytest.fixture
def no_carry(monkeypatch):
    """Turn the carry off (each group loads as if the previous one had placed nothing)."""

    def off():
        monkeypatch.setattr(GroupExecutor, "_carry", lambda self, batch: None)

    return off


def transfers(run) -> list[ev.TransferStats]:
    return [e for e in run[0] if isinstance(e, ev.TransferStats)]


def lbs_ordered(loaded, search: SearchConfig, candidates: float) -> CacheConfig:
    return CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(loaded, search, candidates), prefix_order=True)


def test_a_carried_block_crosses_pcie_once_per_step_with_in_devices_tokens_and_logits(tiny, no_carry):
    cache = lbs_ordered(tiny, SHARING, 1.4)
    carried = search_trace(tiny, SHARING, cache)
    no_carry()
    plain = search_trace(tiny, SHARING, cache)
    assert_same_run(search_trace(tiny, SHARING, CacheConfig(policy="in_device")), carried)
    with_carry, without = transfers(carried), transfers(plain)
    assert [e.groups for e in with_carry] == [e.groups for e in without] and max(e.groups for e in without) >= 2
    fell = [w.step_h2d_bytes - c.step_h2d_bytes for w, c in zip(without, with_carry, strict=True)]
    rose = [c.step_d2d_bytes - w.step_d2d_bytes for w, c in zip(without, with_carry, strict=True)]
    assert sum(fell) > 0, "the workload's consecutive groups share blocks beyond their common prefix"
    assert fell == rose, "each carried block is copied on the device once instead of crossing once"
    assert with_carry[-1].h2d_bytes < without[-1].h2d_bytes


@pytest.mark.parametrize(("search", "candidates"), SWEEP, ids=lambda v: str(v) if isinstance(v, float) else
                         f"{v.beams}x{v.width}-k{v.step_tokens}-s{v.seed}")  # fmt: skip
def test_the_carry_never_moves_more_over_pcie(tiny, no_carry, search, candidates):
    """Per step and in all, for several seeds and budgets: H2D never rises, and D2D rises by what it fell."""
    cache = lbs_ordered(tiny, search, candidates)
    carried = search_trace(tiny, search, cache)
    no_carry()
    plain = search_trace(tiny, search, cache)
    assert carried[2] == plain[2], "the same tree"
    for w, c in zip(transfers(plain), transfers(carried), strict=True):
        assert (w.groups, w.step_d2h_bytes) == (c.groups, c.step_d2h_bytes)
        assert c.step_h2d_bytes <= w.step_h2d_bytes
        assert w.step_h2d_bytes - c.step_h2d_bytes == c.step_d2d_bytes - w.step_d2d_bytes


def test_other_switches_never_carry(tiny, monkeypatch):
    """Without prefix order (or without sharing) no load is given a carry: their bytes stay as they were."""
    carries = []
    load = GroupExecutor._load

    def spying(executor, group, live, carry=None, strict=False, early=False):
        carries.append(bool(carry))
        return load(executor, group, live, carry, strict, early)

    monkeypatch.setattr(GroupExecutor, "_load", spying)
    for switches in ({"prefix_order": False}, {"prefix_order": True, "inter_beam": False}):
        cache = CacheConfig(policy="lbs", kv_budget_bytes=footprint_budget(tiny, SHARING, 1.6), **switches)
        search_trace(tiny, SHARING, cache)
    assert carries and not any(carries)


def test_an_out_of_memory_step_with_the_carry_gives_back_every_run(tiny):
    """A group loaded beside the one before it is given back with it when a decode runs out of memory."""
    cache = CacheConfig(policy="lbs", kv_budget_bytes=budget_for(tiny, 2.0), prefix_order=True)
    reference_used, used, reference_logits, logits = [], [], [], []
    reference, _, _ = run_cache(tiny, cache, device_used=reference_used, logits=reference_logits)
    tokens, groups, events = run_cache(tiny, cache, fail_above=2, device_used=used, logits=logits)
    assert tokens == reference
    torch.testing.assert_close(logits, reference_logits, atol=1e-4, rtol=0)
    assert used == reference_used == [0] * len(used), "no device run outlives its step"
    assert any(isinstance(e, ev.GroupRetried) for e in events)
    assert all(len(g) <= 2 for step in groups for g in step) and max(len(step) for step in groups) >= 3
