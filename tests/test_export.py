"""Export (Markdown, JSON, HTML) and import: content, lossless round trip, escaping, and write faults."""

from __future__ import annotations

import dataclasses
import json
import os
from html.parser import HTMLParser
from pathlib import Path

import pytest

from app.export import (
    ExportError,
    SessionFileInvalid,
    export_session,
    import_session,
    render_session,
    session_dump,
    session_report,
)
from app.export.html_page import COL, MARGIN, ROW, embed_json, layout, render_html
from app.export.markdown import render_markdown
from app.export.report import report_of
from app.formatting import size
from app.recorder import SessionRecorder
from app.session import ROOT_ID, SearchTree, SessionModel
from app.session.series import prompt_traffic
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import SearchConfig

EVIL = "</script><script>alert(1)</script>"


def record(store: SessionStore, stream) -> int:
    recorder = SessionRecorder(store)
    for event in stream:
        recorder.write(event)
    return recorder.session_id


@pytest.fixture
def store() -> SessionStore:
    return SessionStore(memory=True)


@pytest.fixture
def sid(store: SessionStore) -> int:
    return record(store, fake_run("A train travels 60 km in 45 minutes. Speed?", SearchConfig(beams=2, width=2,
                                                                                             max_steps=3)))


def evil_stream():
    for event in fake_run("Is <b>this</b> bold?", SearchConfig(beams=2, width=2, max_steps=2)):
        if isinstance(event, ev.CandidateText | ev.CandidateScored):
            event = dataclasses.replace(event, text=f"{EVIL} & {event.text}")
        if isinstance(event, ev.RunFinished):
            event = dataclasses.replace(event, answer='<img src=x onerror="alert(2)">')
        yield event


def test_markdown_has_question_settings_path_alternatives_answer_and_memory(store: SessionStore, sid: int) -> None:
    text = render_session(store, sid, "md")
    session = store.get_session(sid)
    assert text.startswith("# A train travels 60 km in 45 minutes. Speed?")
    assert "- Model: synthetic:fake" in text and "beams=2, width=2" in text and "Policy: lbs" in text
    for step, cid in enumerate(session["path"], start=1):
        row = next(c for c in store.candidates(sid) if c["id"] == cid)
        assert f"### Step {step} (candidate {cid}, score {row['score']:.3f}" in text
        assert f"> Step {step} of candidate {cid}." in text
    assert text.count("Alternatives:") == 3 and "(pruned, " in text
    assert "## Answer\n\n> The answer is 80 km/h." in text
    assert "Host to device 393.2 kB" in text and "| 3 | 1 | 131.1 kB |" in text


def test_the_memory_tables_start_with_the_questions_own_traffic_when_it_moved_any(store: SessionStore) -> None:
    """Bytes the question's KV moved before step 1 are in the cumulative figures and in no step's: a `prompt` row."""
    stream = [dataclasses.replace(e, h2d_bytes=e.h2d_bytes + 50_000) if isinstance(e, ev.TransferStats) else e
              for e in fake_run("Speed?", SearchConfig(beams=2, width=2, max_steps=2))]
    sid = record(store, stream)
    assert "| prompt |  | 50.0 kB | 0 B |  |  |  |\n| 1 | 1 | 131.1 kB |" in render_session(store, sid, "md")
    assert "<tr><td>prompt</td><td></td><td>50.0 kB</td><td>0 B</td>" in render_session(store, sid, "html")
    plain = record(store, fake_run("Speed?", SearchConfig(beams=2, width=2, max_steps=2)))
    assert "prompt |" not in render_session(store, plain, "md")


def test_the_stored_first_step_gives_the_questions_traffic_as_the_runs_event_does(store: SessionStore) -> None:
    """The exports took it from the stored timeline, the charts, tree and terminal from the event, each its own
    subtraction: one function (app.session.series.prompt_traffic) reads both."""
    stream = [dataclasses.replace(e, h2d_bytes=e.h2d_bytes + 50_000, d2h_bytes=e.d2h_bytes + 7_000)
              if isinstance(e, ev.TransferStats) else e for e in fake_run("Speed?", SearchConfig(beams=2, max_steps=2))]
    first = next(e for e in stream if isinstance(e, ev.TransferStats))
    stored = session_report(store, record(store, stream)).timeline[0]
    assert prompt_traffic(stored) == prompt_traffic(first) == (50_000, 7_000)
    assert prompt_traffic({**stored, "h2d_bytes": None, "step_h2d_bytes": None})[0] == 0  # an old row's empty figure


def test_markdown_of_a_cancelled_run_follows_the_best_beam(store: SessionStore) -> None:
    stopped = []
    stream = fake_run("q", SearchConfig(beams=2, width=2, max_steps=4), should_stop=lambda: len(stopped) >= 2)
    sid = record(store, (stopped.append(e) or e if isinstance(e, ev.StepSelected) else e for e in stream))
    text = render_session(store, sid, "md")
    assert "Status: cancelled" in text and "### Step 2" in text and "(no answer" in text


def stopped_run():
    stopped = []
    stream = fake_run("q", SearchConfig(beams=3, width=2, max_steps=4, seed=8), should_stop=lambda: len(stopped) >= 2)
    return [stopped.append(e) or e if isinstance(e, ev.StepSelected) else e for e in stream]


def failed_run():
    stream = list(fake_run("q", SearchConfig(beams=2, width=2, max_steps=3)))
    first = next(i for i, e in enumerate(stream) if isinstance(e, ev.StepSelected))
    return [*stream[: first + 5], ev.RunFailed(error="RuntimeError", message="out of memory")]


STREAMS = {
    "finished": lambda: fake_run("A train?", SearchConfig(beams=3, width=2, max_steps=3, seed=9)),
    "cancelled": stopped_run,
    "failed": failed_run,
    "markup": evil_stream,
}


@pytest.mark.parametrize("fmt", ["md", "html"])
@pytest.mark.parametrize("name", sorted(STREAMS))
def test_the_export_of_a_stored_session_is_the_export_of_the_windows_model(store: SessionStore, name: str,
                                                                          fmt: str) -> None:
    """Recorded, stored, read back and replayed, a run exports exactly as the model the window folded live."""
    stream, live = list(STREAMS[name]()), SessionModel()
    for event in stream:
        live.apply(event)
    sid = record(store, stream)
    report = report_of(live, store.get_session(sid))
    expected = render_markdown(report) if fmt == "md" else render_html(report, session_dump(store, sid))
    assert render_session(store, sid, fmt) == expected
    assert report.path and all(node["state"] != "running" for node in report.path)


def test_json_round_trip_gives_an_identical_session(store: SessionStore, sid: int, tmp_path: Path) -> None:
    first = export_session(store, sid, "json", tmp_path / "one.json")
    other = SessionStore(tmp_path / "other.db")
    new_id = import_session(other, first)
    second = export_session(other, new_id, "json", tmp_path / "two.json")
    assert json.loads(first.read_text(encoding="utf-8")) == json.loads(second.read_text(encoding="utf-8"))
    assert other.events(new_id) == store.events(sid)
    assert other.get_session(new_id)["title"] == store.get_session(sid)["title"]
    again = import_session(store, first)  # into the same db: a second copy with its own id
    assert again != sid and session_dump(store, again) == session_dump(store, sid)
    other.close()


def test_json_export_of_a_running_session_imports_as_interrupted(store: SessionStore, tmp_path: Path) -> None:
    recorder = SessionRecorder(store)
    for event in fake_run("q"):
        recorder.write(event)
        if isinstance(event, ev.StepSelected):
            break
    path = export_session(store, recorder.session_id, "json", tmp_path / "s.json")
    assert store.get_session(import_session(store, path))["status"] == "interrupted"


@pytest.mark.parametrize(("content", "message"), [
    ("not json at all", "not valid JSON"),
    ('{"format": "other"}', "not a Beamwise session export"),
    ('{"format": "beamwise-session", "version": 99}', "newer Beamwise"),
    ('{"format": "beamwise-session", "version": 1, "session": {}}', "missing its 'candidates'"),
    ('{"format": "beamwise-session", "version": "2"}', r"export version this Beamwise does not know \('2'\)"),
    ('{"format": "beamwise-session", "version": true}', r"does not know \(True\); exports say 1 to 2"),
    ('{"format": "beamwise-session", "version": 0}', r"does not know \(0\)"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply to read"),  # was a RecursionError out of main
    ('{"format": "beamwise-session", "version": ' + "9" * 5000 + "}", "a number with too many digits to read"),
])  # fmt: skip
def test_import_refuses_bad_files_clearly(store: SessionStore, tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(SessionFileInvalid, match=message):
        import_session(store, path)
    assert store.list_sessions() == []
    with pytest.raises(SessionFileInvalid, match="cannot read"):
        import_session(store, tmp_path / "missing.json")


@pytest.mark.parametrize(("status", "said"), [("bogus", "'bogus'"), (["finished"], r"\['finished'\]")])
def test_import_refuses_a_status_no_session_has(store: SessionStore, sid: int, tmp_path: Path, status: object,
                                                said: str) -> None:
    """A list as the status (a damaged file) raised TypeError out of the import: a set cannot hold a list."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**session_dump(store, sid), "session": {**session_dump(store, sid)["session"],
                                                                      "status": status}}), encoding="utf-8")
    with pytest.raises(SessionFileInvalid, match=f"status {said}; a session is cancelled, failed, finished, inter"):
        import_session(store, path)


def test_import_refuses_unknown_fields_and_bad_events(store: SessionStore, sid: int, tmp_path: Path) -> None:
    dump = session_dump(store, sid)
    bad = {**dump, "candidates": [{**dump["candidates"][0], "text) VALUES (1); DROP TABLE sessions; --": 1}]}
    (tmp_path / "a.json").write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(SessionFileInvalid, match="unknown candidates fields"):
        import_session(store, tmp_path / "a.json")
    bad = {**dump, "events": [*dump["events"], {"type": "no_such_event"}]}
    (tmp_path / "b.json").write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(SessionFileInvalid, match="event"):
        import_session(store, tmp_path / "b.json")
    bad = {**dump, "events": []}  # the exports and the window show a session from its events
    (tmp_path / "c.json").write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(SessionFileInvalid, match="do not start with run_started"):
        import_session(store, tmp_path / "c.json")
    assert [s["id"] for s in store.list_sessions()] == [sid]


class ScriptCounter(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append(tag)
        self._in_script = tag == "script"

    def handle_endtag(self, tag) -> None:
        self._in_script = False

    def handle_data(self, data) -> None:
        if self._in_script:
            self.scripts.append(data)


def test_html_escapes_model_text_and_cannot_be_broken_out_of(store: SessionStore, tmp_path: Path) -> None:
    sid = record(store, evil_stream())
    page = export_session(store, sid, "html", tmp_path / "s.html").read_text(encoding="utf-8")
    parser = ScriptCounter()
    parser.feed(page)
    assert parser.tags.count("script") == 2  # our JSON carrier and our small script, nothing injected
    assert "img" not in parser.tags and "b" not in parser.tags
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt; &amp; Step 1" in page
    embedded = json.loads(parser.scripts[0])
    assert embedded == session_dump(store, sid)
    assert embedded["candidates"][0]["text"].startswith(EVIL)
    assert "<svg" in page and page.count("<circle") == len(store.candidates(sid)) + 1  # and the prompt


def test_embed_json_writes_nan_and_the_infinities_as_null_for_the_pages_json_parse() -> None:
    """Python writes NaN and Infinity, which JSON.parse refuses: the page's tree did not open (an imported NaN)."""
    data = {"score": float("nan"), "rows": [1.5, float("inf"), (float("-inf"), "x")], "kept": {"n": 2}}
    assert json.loads(embed_json(data)) == {"score": None, "rows": [1.5, None, [None, "x"]], "kept": {"n": 2}}
    assert "NaN" not in embed_json(data) and "Infinity" not in embed_json(data)


def test_embed_json_never_contains_markup() -> None:
    text = embed_json({"a": "</script><!-- & \u2028"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><!-- & \u2028"}


def test_tree_layout_gives_each_subtree_its_own_rows() -> None:
    start = next(iter(fake_run("q", SearchConfig(beams=2, width=2))))
    tree = SearchTree()
    tree.apply_many([start, *(ev.CandidateText(step, cid, parent, "", 0, False, 0)
                              for step, cid, parent in ((1, 1, None), (1, 2, None), (2, 3, 1), (2, 4, 1), (2, 5, 2)))])
    pos = layout(tree)
    assert pos[3][1] < pos[4][1] < pos[5][1]  # leaves in order
    assert pos[1][1] == (pos[3][1] + pos[4][1]) / 2  # a parent in the middle of its children
    assert pos[1][0] < pos[3][0] and pos[ROOT_ID][0] < pos[1][0]
    assert min(y for _, y in pos.values()) == MARGIN  # the page starts at its margin


def test_the_page_lays_the_tree_out_as_the_window_does(store: SessionStore) -> None:
    """The window lays a live run out event by event; the page lays the stored run out in one replay."""
    stream = list(fake_run("q", SearchConfig(beams=3, width=3, max_steps=4, seed=6)))
    live = SessionModel()
    for event in stream:
        live.apply(event)
    report = session_report(store, record(store, stream))
    assert layout(report.tree) == layout(live.tree)
    top = min(node.y for node in live.tree.nodes.values())
    assert layout(report.tree) == {cid: (MARGIN + n.step * COL, MARGIN + (n.y - top) * ROW)
                                   for cid, n in live.tree.nodes.items()}


def test_export_to_a_missing_folder_or_a_file_path_is_a_clear_error(store: SessionStore, sid: int,
                                                                    tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="does not exist") as info:
        export_session(store, sid, "md", tmp_path / "nope" / "s.md")
    assert str(tmp_path / "nope") in str(info.value) and "Create the folder" in info.value.user_message()
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(ExportError):
        export_session(store, sid, "md", tmp_path / "file" / "s.md")
    with pytest.raises(ExportError, match="is a folder"):
        export_session(store, sid, "md", tmp_path)
    with pytest.raises(ValueError, match="md, json, html"):
        render_session(store, sid, "pdf")


@pytest.mark.skipif(os.name == "nt" or os.geteuid() == 0, reason="needs POSIX permissions that bind the user")
def test_export_to_a_read_only_folder_is_a_clear_error(store: SessionStore, sid: int, tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(ExportError, match="cannot write to the folder") as info:
            export_session(store, sid, "md", folder / "s.md")
        assert "Choose a folder you can write to" in info.value.user_message()
    finally:
        folder.chmod(0o755)


def test_a_failed_write_leaves_no_partial_file_and_keeps_the_old_one(store: SessionStore, sid: int, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "s.md"
    target.write_text("old export", encoding="utf-8")

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(ExportError, match="nothing was written"):
        export_session(store, sid, "md", target)
    assert target.read_text(encoding="utf-8") == "old export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.md"]


def test_a_folder_that_refuses_new_files_is_a_clear_error(store: SessionStore, sid: int, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """What a read-only folder does to the export, also when the tests run as root."""

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("app.file_replace.tempfile.mkstemp", refuse)
    with pytest.raises(ExportError, match="cannot write to the folder") as info:
        export_session(store, sid, "html", tmp_path / "s.html")
    assert str(tmp_path) in str(info.value) and "Permission denied" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_a_file_name_near_the_systems_limit_is_written(tmp_path: Path) -> None:
    """The temporary file beside it was named after it plus ~15 bytes: past 255 bytes, 'File name too long'."""
    path = tmp_path / ("𝐇" * 62 + ".html")  # 253 bytes of UTF-8: a name Linux and macOS take
    with SessionStore(memory=True) as store:
        recorder = SessionRecorder(store)
        for event in fake_run("Wie viele Äpfel? 苹果 🍎"):
            recorder.write(event)
        assert export_session(store, recorder.session_id, "html", path) == path
    assert "苹果 🍎" in path.read_text(encoding="utf-8") and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_html_lets_right_to_left_text_read_right_to_left() -> None:
    """Without dir="auto" an Arabic question sat in a left-to-right block: aligned left, its '؟' at the wrong end."""
    with SessionStore(memory=True) as store:
        recorder = SessionRecorder(store)
        for event in fake_run("كم عدد التفاح؟\nשלום, how many?"):
            recorder.write(event)
        page = render_session(store, recorder.session_id, "html")

    class Blocks(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.blocks: list[dict[str, str | None]] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag in ("pre", "h1"):
                self.blocks.append(dict(attrs))

    parser = Blocks()
    parser.feed(page)
    assert len(parser.blocks) >= 4 and all(block.get("dir") == "auto" for block in parser.blocks)
    assert "unicode-bidi:plaintext" in page  # each line of a block takes its own direction
    assert "كم عدد التفاح؟" in page


def test_exports_give_the_whole_kv_budget_and_the_generators_part_as_run_does(store: SessionStore) -> None:
    """The session row keeps the generator's part of the budget: the exports showed it alone as 'KV budget',
    where `beamwise run`'s first line gives the whole budget and the generator's part beside it."""
    def with_verifier_kv(stream):
        for event in stream:
            if isinstance(event, ev.RunStarted):
                event = dataclasses.replace(event, kv_budget_bytes=500_000, verifier_kv_budget_bytes=500_000,
                                            cache={**event.cache, "kv_budget_bytes": 1_000_000})
            yield event

    shared = record(store, with_verifier_kv(fake_run("Two parts?", SearchConfig(beams=2, width=2, max_steps=2))))
    alone = record(store, fake_run("One part?", SearchConfig(beams=2, width=2, max_steps=2)))
    assert "KV budget 1.0 MB (500.0 kB for the generator)" in render_session(store, shared, "md")
    assert "<td>KV budget</td><td>1.0 MB (500.0 kB for the generator)</td>" in render_session(store, shared, "html")
    budget = store.get_session(alone)["kv_budget_bytes"]
    assert f"KV budget {size(budget)}\n" in render_session(store, alone, "md")


@pytest.mark.parametrize("tail", ["", "-wal"])
def test_an_export_over_the_default_database_is_refused_when_another_is_open(sid: int, tmp_path: Path, monkeypatch,
                                                                          tail: str) -> None:
    """Only the open store's database was refused: `sessions export 1 --db other.db -o ~/.../sessions.db --force`
    replaced every session of the default database (`--json` refused it already)."""
    from app.db_path import default_db_path

    monkeypatch.setenv("BEAMWISE_DATA_DIR", str(tmp_path / "data"))
    with SessionStore(tmp_path / "other.db") as other, SessionStore() as default:  # open: its -wal is there
        other_sid = record(other, fake_run("2+2?", SearchConfig(beams=1, width=1, max_steps=1)))
        record(default, fake_run("3+3?", SearchConfig(beams=1, width=1, max_steps=1)))
        target = default_db_path().with_name(default_db_path().name + tail)
        before = target.read_bytes()
        with pytest.raises(ExportError, match="it is the session database itself; nothing was written"):
            export_session(other, other_sid, "md", target)
        assert target.read_bytes() == before
