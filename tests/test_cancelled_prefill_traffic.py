"""A run cancelled in its first step still records the question's own KV traffic (a prefix-cache load): before,
only the first step's transfer stats carried it, so such a run was saved with H2D 0 B though the cached prefix
had crossed to the device (`sessions show`, exports)."""

from __future__ import annotations

import pytest

from app.session import SessionModel
from app.session.rows import session_facts
from engine.config import CacheConfig
from engine.search import run
from tests.test_prefix_cache import BLOCK, PROMPT, SEARCH, cache_dir, prefill_of  # noqa: F401  (a fixture)


def events_of(tiny, stop_at_first_step: bool) -> list:
    cache = CacheConfig(policy="in_device", block_size=BLOCK, prefix_cache=True, prefill_chunk=10)
    seen: list = []
    stop = lambda: stop_at_first_step and any(e.type == "step_started" for e in seen)  # noqa: E731
    for event in run("", tiny, SEARCH, cache, prompt_ids=PROMPT, should_stop=stop):
        seen.append(event)
    return seen


@pytest.mark.usefixtures("cache_dir")
def test_a_run_cancelled_in_step_1_records_the_cached_prefix_it_loaded(tiny):
    events_of(tiny, stop_at_first_step=False)  # keeps the prompt's blocks
    events = events_of(tiny, stop_at_first_step=True)
    assert events[-1].type == "run_cancelled" and not any(e.type == "transfer_stats" for e in events)
    prefill = prefill_of(events)
    loaded = prefill.cached_tokens * tiny.kv_shape.token_bytes()
    assert prefill.cached_tokens == 32 and prefill.h2d_bytes == loaded  # in_device: the cached blocks cross once
    facts = session_facts(_model(events))
    assert (facts["h2d_bytes"], facts["d2h_bytes"]) == (loaded, prefill.d2h_bytes)


@pytest.mark.usefixtures("cache_dir")
def test_a_finished_run_reads_its_traffic_from_its_steps_as_before(tiny):
    events_of(tiny, stop_at_first_step=False)
    events = events_of(tiny, stop_at_first_step=False)
    last = [e for e in events if e.type == "transfer_stats"][-1]
    kept = events[-1].prefix_kept_d2h_bytes
    assert last.h2d_bytes >= prefill_of(events).h2d_bytes > 0  # the steps' totals hold the question's too
    facts = session_facts(_model(events))
    assert (facts["h2d_bytes"], facts["d2h_bytes"]) == (last.h2d_bytes, last.d2h_bytes + kept)


def _model(events) -> SessionModel:
    model = SessionModel()
    model.apply_many(events)
    return model
