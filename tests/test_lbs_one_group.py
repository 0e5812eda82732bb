"""With one group, the LBS switches that only act between groups (balanced prefetch, prefix order)
must cost nothing: the same plan, the same copies (bytes and calls), syncs, loads and allocations."""

from __future__ import annotations

from collections import Counter

import pytest

from engine.config import CacheConfig, SearchConfig
from engine.kv.store import KVStore
from engine.search import run

SEARCH = SearchConfig(beams=2, width=3, step_tokens=6, max_steps=3, step_delimiter=None, seed=3)
SWITCHES = {
    "inter_beam": {"inter_beam": True, "balanced_prefetch": False, "prefix_order": False},
    "balanced_prefetch": {"inter_beam": True, "balanced_prefetch": True, "prefix_order": False},
    "prefix_order": {"inter_beam": True, "balanced_prefetch": True, "prefix_order": True},
}


def traced_run(loaded, monkeypatch, switches: dict) -> tuple[Counter, list, list]:
    """Counts every store operation of one run; returns them, the transfer stats and the groups."""
    calls: Counter = Counter()
    for method in ("copy", "sync", "loading", "wait_loaded", "working", "release", "place"):
        original = getattr(KVStore, method)

        def traced(self, *args, _original=original, _name=method, **kwargs):
            calls[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(KVStore, method, traced)
    cache = CacheConfig(policy="lbs", kv_budget_bytes=4 << 20, **switches)  # the whole search fits one group
    events = list(run("What is 2+3?", loaded, SEARCH, cache))
    assert events[-1].type == "run_finished", events[-1]
    monkeypatch.undo()
    stats = [e for e in events if e.type == "transfer_stats"]
    groups = [tuple(sorted((m.group, m.id) for m in e.candidates)) for e in events if e.type == "memory_snapshot"]
    return calls, stats, groups


@pytest.mark.parametrize("name", ["balanced_prefetch", "prefix_order"])
def test_switches_between_groups_do_no_work_with_one_group(tiny, monkeypatch, name):
    base_calls, base_stats, base_groups = traced_run(tiny, monkeypatch, SWITCHES["inter_beam"])
    calls, stats, groups = traced_run(tiny, monkeypatch, SWITCHES[name])
    assert all(s.groups == 1 for s in base_stats + stats), "pick a budget that holds one group"
    assert groups == base_groups
    assert calls == base_calls
    fields = ("h2d_bytes", "d2h_bytes", "d2d_bytes", "h2d_calls", "d2h_calls")
    assert [[getattr(s, f) for f in fields] for s in stats] == [[getattr(s, f) for f in fields] for s in base_stats]
