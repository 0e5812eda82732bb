"""Exports are files read anywhere: Markdown and HTML give a run's start as stored, with the recording machine's UTC
offset, while `sessions list`/`show` and the Sessions tab show this machine's local time (README, Exports)."""

from __future__ import annotations

import re

from app.export import render_session
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine.config import SearchConfig


def test_markdown_and_html_keep_the_stored_stamp_with_its_offset() -> None:
    store = SessionStore(memory=True)
    recorder = SessionRecorder(store)
    for event in fake_run("How fast is the train?", SearchConfig(beams=2, width=2, max_steps=2)):
        recorder.write(event)
    created = store.get_session(recorder.session_id)["created"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", created)
    assert f"- Started: {created}; " in render_session(store, recorder.session_id, "md")
    assert f"<tr><td>Started</td><td>{created}</td></tr>" in render_session(store, recorder.session_id, "html")
