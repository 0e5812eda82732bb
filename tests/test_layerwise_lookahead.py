"""Layer-wise with lookahead (engine/kv/layerwise.py `SavedRow`): a child's roll-outs replace its row, so the row
waits on the host until the next step forks the child, and the search gives in_device's tokens and logits.
Before, the next step found no row for the child and the run failed ("4 is not in list")."""

from __future__ import annotations

import dataclasses

import pytest

from engine import events as ev
from engine.config import CacheConfig, SearchConfig
from engine.kv import layerwise
from tests.test_equivalence import assert_same_run, footprint_budget, search_trace

LOOKAHEAD = SearchConfig(beams=2, width=2, step_tokens=6, max_steps=3, step_delimiter=None, seed=5, lookahead=2)


@pytest.mark.parametrize(
    "search, candidates",
    [(LOOKAHEAD, 100), (LOOKAHEAD, 4.2), (SearchConfig(beams=3, width=2, step_tokens=5, max_steps=3, step_delimiter=" ",
                                                        seed=2, lookahead=1), 100)],
    ids=["resident", "streamed", "uneven-steps"],
)  # fmt: skip
def test_layerwise_with_lookahead_gives_in_devices_tokens_and_logits(tiny, search, candidates):
    reference = search_trace(tiny, search, CacheConfig(policy="in_device"))
    budget = footprint_budget(tiny, search, candidates)
    other = search_trace(tiny, search, CacheConfig(policy="layerwise", kv_budget_bytes=budget))
    assert_same_run(reference, other)


def test_a_saved_row_crosses_once_each_way_and_is_forgotten_once_its_candidate_is_released(tiny, monkeypatch):
    """Every layer resident: the only PCIe bytes are the children's rows saved before their roll-outs (to the
    host) and the kept children's rows brought back (to the device), exactly their bytes; a pruned child's
    row never comes back, and no saved row outlives its candidate."""
    saved_bytes: dict[int, int] = {}
    save = layerwise.LayerwisePolicy._save_rows
    run_step = layerwise.LayerwisePolicy.run_step
    outlived = []

    def recorded_save(policy, sources, live):
        before = set(policy.saved)
        save(policy, sources, live)
        for c in set(policy.saved) - before:
            saved_bytes[c] = sum(kv.numel() * kv.element_size() for kv in policy.saved[c].layers)

    def checked_step(policy, plan, live, timing, should_stop):
        yield from run_step(policy, plan, live, timing, should_stop)
        outlived.extend(set(policy.saved) - set(live))

    monkeypatch.setattr(layerwise.LayerwisePolicy, "_save_rows", recorded_save)
    monkeypatch.setattr(layerwise.LayerwisePolicy, "run_step", checked_step)
    events, _, _ = search_trace(tiny, LOOKAHEAD, CacheConfig(policy="layerwise", kv_budget_bytes=10**9))
    stats = [e for e in events if isinstance(e, ev.TransferStats)]
    parents = {e.parent for e in events if isinstance(e, ev.CandidateText)}
    assert saved_bytes and not outlived
    assert stats[-1].d2h_bytes == sum(saved_bytes.values())  # the run's totals (roll-outs are inside steps)
    assert stats[-1].h2d_bytes == sum(b for c, b in saved_bytes.items() if c in parents)
    assert set(saved_bytes) - parents  # some rolled-out children were pruned: their rows stayed on the host

    plain = dataclasses.replace(LOOKAHEAD, lookahead=0)
    events, _, _ = search_trace(tiny, plain, CacheConfig(policy="layerwise", kv_budget_bytes=10**9))
    last = [e for e in events if isinstance(e, ev.TransferStats)][-1]
    assert last.d2h_bytes == last.h2d_bytes == 0
