"""The exports' `prompt` row (the question's KV traffic before step 1) comes from one function: PrefillDone's figures
when the run has them, else the first step's totals less its own (sessions stored before PrefillDone carried them).
A run cancelled in step 1 showed H2D above 0 in its headline and no table row to add up to it."""

from __future__ import annotations

import dataclasses

import pytest

from app.export import render_session, session_report
from app.export.markdown import traffic_rows
from app.formatting import size
from app.recorder import SessionRecorder
from app.session.series import prompt_traffic, question_traffic
from app.store import SessionStore
from engine import events as ev
from tests.test_cancelled_prefill_traffic import events_of
from tests.test_prefix_cache import cache_dir, prefill_of  # noqa: F401  (a fixture)


def _recorded(events: list) -> tuple[SessionStore, int]:
    store = SessionStore(memory=True)
    recorder = SessionRecorder(store)
    for event in events:
        recorder.write(event)
    return store, recorder.session_id


@pytest.mark.usefixtures("cache_dir")
def test_a_run_cancelled_in_step_1_shows_its_questions_traffic_as_the_prompt_row(tiny) -> None:
    events_of(tiny, stop_at_first_step=False)  # keeps the prompt's blocks in the prefix cache
    events = events_of(tiny, stop_at_first_step=True)
    assert events[-1].type == "run_cancelled" and not any(e.type == "transfer_stats" for e in events)
    prefill = prefill_of(events)
    assert prefill.h2d_bytes > 0
    store, sid = _recorded(events)
    report = session_report(store, sid)
    assert report.timeline == [] and report.session["h2d_bytes"] == prefill.h2d_bytes
    assert traffic_rows(report) == [("prompt", "", size(prefill.h2d_bytes), size(prefill.d2h_bytes), "", "", "")]
    markdown = render_session(store, sid, "md")
    assert f"Host to device {size(prefill.h2d_bytes)}, device to host {size(prefill.d2h_bytes)}," in markdown
    assert f"| prompt |  | {size(prefill.h2d_bytes)} | {size(prefill.d2h_bytes)} |  |  |  |" in markdown
    page = render_session(store, sid, "html")
    assert f"<tr><td>prompt</td><td></td><td>{size(prefill.h2d_bytes)}</td>" in page


@pytest.mark.usefixtures("cache_dir")
def test_a_finished_runs_prompt_row_is_the_same_from_either_source_and_adds_up(tiny) -> None:
    events_of(tiny, stop_at_first_step=False)
    events = events_of(tiny, stop_at_first_step=False)
    first = next(e for e in events if isinstance(e, ev.TransferStats))
    prefill = prefill_of(events)
    assert (prefill.h2d_bytes, prefill.d2h_bytes) == prompt_traffic(first)  # the same counters, read at step 1
    store, sid = _recorded(events)
    report = session_report(store, sid)
    assert report.before_step_1 == (prefill.h2d_bytes, prefill.d2h_bytes)
    assert report.session["h2d_bytes"] == prefill.h2d_bytes + sum(t["step_h2d_bytes"] for t in report.timeline)


def test_a_session_stored_before_prefill_done_carried_the_traffic_reads_it_from_its_first_step() -> None:
    old = ev.PrefillDone(prompt_tokens=12, seconds=0.01)  # no h2d_bytes / d2h_bytes: 0 when read back
    row = {"h2d_bytes": 50_000, "step_h2d_bytes": 8_000, "d2h_bytes": 9_000, "step_d2h_bytes": 2_000}
    assert question_traffic(old, row) == (42_000, 7_000)
    assert question_traffic(None, row) == (42_000, 7_000)
    assert question_traffic(dataclasses.replace(old, h2d_bytes=42_000, d2h_bytes=7_000), None) == (42_000, 7_000)
    assert question_traffic(old, None) == question_traffic(None, None) == (0, 0)
