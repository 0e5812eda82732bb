"""Exports of a conversation: one title in every format (the exported session's, renamed or not), and a memory table
whose rows add up to its totals (the prefix cache's copy of the kept blocks after the last step has its own row)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from app.conversations import history
from app.export import export_session, import_session, render_session, session_report
from app.export.markdown import traffic_rows
from app.formatting import size
from app.recorder import SessionRecorder
from app.session.series import prompt_traffic
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import SearchConfig

KEPT = 70_000  # the prefix cache's D2H after the last step
PROMPT = 50_000  # the question's H2D before step 1 (a prefix-cache load)


def record(store: SessionStore, stream, previous: int | None = None) -> int:
    """Record `stream`, a follow-up of `previous` when given (its run sent the earlier turns, as a real one does)."""
    sent = () if previous is None else (*history(store, previous), (store.get_session(previous)["question"],
                                                                    store.get_session(previous)["answer"] or ""))
    recorder = SessionRecorder(store, previous=previous)
    for event in stream:
        recorder.write(dataclasses.replace(event, history=sent) if isinstance(event, ev.RunStarted) else event)
    return recorder.session_id


def cached_run(question: str, seed: int = 0):
    """A fake run whose question's KV came from the prefix cache and whose kept blocks it copied back at the end."""
    for event in fake_run(question, SearchConfig(beams=2, width=2, max_steps=2, seed=seed)):
        if isinstance(event, ev.TransferStats):
            event = dataclasses.replace(event, h2d_bytes=event.h2d_bytes + PROMPT)
        elif isinstance(event, ev.RunFinished):
            event = dataclasses.replace(event, prefix_kept_d2h_bytes=KEPT)
        yield event


@pytest.fixture
def store() -> SessionStore:
    return SessionStore(memory=True)


@pytest.fixture
def renamed(store: SessionStore) -> tuple[int, int]:
    """A conversation of two turns renamed: its first turn, whose title the window lists it under and its Rename
    changes."""
    first = record(store, fake_run("What is 2+3?", SearchConfig(beams=2, width=2, max_steps=2)))
    second = record(store, fake_run("And 3+4?", SearchConfig(beams=2, width=2, max_steps=2, seed=1)), first)
    store.rename(first, "My renamed conversation")
    return first, second


def test_every_format_titles_a_renamed_conversation_as_the_list_does(store: SessionStore,
                                                                     renamed: tuple[int, int]) -> None:
    """The Markdown's heading was another title than the page's, the window's and the list's."""
    _, second = renamed
    markdown = render_session(store, second, "md")
    assert markdown.startswith("# My renamed conversation\n\nA conversation of 2 turns.")
    assert "## Turn 1: My renamed conversation" in markdown and "## Turn 2: And 3+4?" in markdown
    page = render_session(store, second, "html")
    assert "<title>My renamed conversation · Beamwise</title>" in page
    assert '<h1 dir="auto">My renamed conversation</h1>' in page
    turns = json.loads(render_session(store, second, "json"))["turns"]
    assert [turn["session"]["title"] for turn in turns] == ["My renamed conversation", "And 3+4?"]


def test_any_turn_exported_is_headed_by_the_conversations_title_in_markdown_and_html_alike(
        store: SessionStore, renamed: tuple[int, int]) -> None:
    """A conversation's title is its first turn's (the Sessions tab lists it so): the export of turn 2 was headed
    by turn 2's own title (its question) while its file was named after the conversation."""
    for turn in renamed:
        assert render_session(store, turn, "md").startswith("# My renamed conversation\n\nA conversation of 2 turns.")
        assert '<h1 dir="auto">My renamed conversation</h1>' in render_session(store, turn, "html")


def test_a_renamed_conversation_imported_is_listed_and_exported_under_its_new_title(
        tmp_path: Path, store: SessionStore, renamed: tuple[int, int]) -> None:
    _, second = renamed
    other = SessionStore(memory=True)
    new_id = import_session(other, export_session(store, second, "json", tmp_path / "c.json"))
    assert other.get_session(new_id)["conversation_id"] != new_id  # the imported turn 2 ...
    assert other.get_session(other.get_session(new_id)["conversation_id"])["title"] == "My renamed conversation"
    assert render_session(other, new_id, "md").startswith("# My renamed conversation\n")


def test_the_memory_table_adds_up_to_its_totals_with_the_prefix_caches_copy_as_a_row(store: SessionStore) -> None:
    """`prefix_kept_d2h_bytes` was in "device to host" and in no row: every row showed D2H 0 B."""
    sid = record(store, cached_run("Speed?"))
    report = session_report(store, sid)
    timeline, session = report.timeline, report.session
    h2d = prompt_traffic(timeline[0])[0] + sum(t["step_h2d_bytes"] for t in timeline)
    d2h = sum(t["step_d2h_bytes"] for t in timeline) + KEPT
    assert (session["h2d_bytes"], session["d2h_bytes"]) == (h2d, d2h)  # the totals are exactly the rows' sums
    rows = traffic_rows(report)
    assert rows[0] == ("prompt", "", size(PROMPT), "0 B", "", "", "")
    assert rows[-1] == ("prefix cache", "", "0 B", size(KEPT), "", "", "")
    markdown = render_session(store, sid, "md")
    assert f"device to host {size(d2h)}," in markdown
    assert f"| prefix cache |  | 0 B | {size(KEPT)} |  |  |  |\n" in markdown
    assert markdown.rstrip("\n").endswith(f"| prefix cache |  | 0 B | {size(KEPT)} |  |  |  |")  # after the last step
    page = render_session(store, sid, "html")
    assert f"<tr><td>prefix cache</td><td></td><td>0 B</td><td>{size(KEPT)}</td>" in page


def test_a_conversations_every_turn_shows_its_own_prefix_cache_row(store: SessionStore) -> None:
    first = record(store, cached_run("What is 2+3?"))
    second = record(store, cached_run("And 3+4?", seed=1), first)
    assert render_session(store, second, "md").count(f"| prefix cache |  | 0 B | {size(KEPT)} |") == 2


def test_a_run_the_prefix_cache_kept_nothing_of_has_no_such_row(store: SessionStore) -> None:
    sid = record(store, fake_run("Speed?", SearchConfig(beams=2, width=2, max_steps=2)))
    assert "prefix cache" not in render_session(store, sid, "md")
    assert "prefix cache" not in render_session(store, sid, "html")
