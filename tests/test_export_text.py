"""Exports of hostile and awkward model text, read as a user reads them: a Markdown viewer's rendering, the JSON
round trip drawn over texts (follow-up turns too), and the window's default export file name."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import unicodedata
from html import unescape
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from app.conversations import history
from app.export import export_session, import_session, render_session
from app.export.md_escape import literal_text, without_controls
from app.formatting import brief
from app.recorder import SessionRecorder
from app.store import SessionStore
from benchmarks.fake_search import fake_run
from engine import events as ev
from engine.config import SearchConfig

VIEWER = MarkdownIt("commonmark").enable(["table", "strikethrough"])  # GitHub's flavour, near enough
HOSTILE = ["# Heading from the model\nline after", "| a | b |\n|---|---|\n| 1 | 2 |", "Use ```python\nx = 1\n``` now",
           "* item\n- item\n1. item\n***\nsetext\n===", "![pixel](http://tracker.example/p.png) [x](javascript:1)",
           "<script>alert(1)</script> <img src=x onerror=alert(2)> <!-- hidden -->", "2*3*4 = 24, _not_ emphasis",
           "    indented\n\n    code block?", "> a quote\n\\\\ two backslashes"]  # fmt: skip


def record(store: SessionStore, stream, previous: int | None = None) -> int:
    recorder = SessionRecorder(store, previous=previous)
    for event in stream:
        recorder.write(event)
    return recorder.session_id


def with_texts(question: str, texts: list[str], answer: str, sent: tuple = (), seed: int = 0):
    """A fake run whose candidates say `texts` (in turn), its answer `answer`, sent the earlier turns `sent`."""
    for event in fake_run(question, SearchConfig(beams=2, width=2, max_steps=2, seed=seed)):
        if isinstance(event, ev.CandidateText | ev.CandidateScored):
            event = dataclasses.replace(event, text=texts[(event.id - 1) % len(texts)])
        elif isinstance(event, ev.RunFinished):
            event = dataclasses.replace(event, answer=answer)
        elif isinstance(event, ev.RunStarted):
            event = dataclasses.replace(event, history=sent)
        yield event


def shown(markdown: str) -> tuple[str, set[str]]:
    """What a Markdown viewer shows of `markdown`: its text with whitespace collapsed, and the tags it built."""
    page = VIEWER.render(markdown)
    tags = set(re.findall(r"<([a-z0-9]+)", page))
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", page)).split()), tags


def test_a_models_markdown_builds_nothing_in_the_transcript() -> None:
    """A step starting with `#` was a heading, `|` lines a table, backticks a code block to the quote's end,
    `![x](url)` an image the viewer fetched from the web, `2*3*4` lost its stars to emphasis."""
    store = SessionStore(memory=True)
    sid = record(store, with_texts("What is 2*3*4?", HOSTILE, "| 24 |\n# done\n```"))
    text, tags = shown(render_session(store, sid, "md"))
    assert tags == {"h1", "h2", "h3", "p", "blockquote", "ul", "li", "table", "thead", "tbody", "tr", "th", "td"}
    for hostile in [*HOSTILE[:8], "| 24 | # done ```"]:  # on the path, or an alternative (its first 80 characters)
        assert brief(hostile).removesuffix("…") in text


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("#*_-+=|`~<>[]()!\\&;:.1 \t\nxé$")) | st.characters(), max_size=60))
def test_a_viewer_shows_the_characters_of_any_text_without_math(text: str) -> None:
    """Outside dollars (math is left as written), the rendered quote is the text itself: nothing built from it."""
    text = text.replace("$", "")
    quoted = "\n".join(f"> {line}" for line in literal_text(text).split("\n"))
    seen, tags = shown(quoted)
    assert tags <= {"blockquote", "p"}
    assert seen == " ".join(without_controls(text).replace("\x00", "\ufffd").split())


def test_math_is_left_as_written_and_control_characters_are_replaced() -> None:
    """Escaping inside $...$ would hand a viewer that renders math `\\\\frac`; raw control characters in the file
    drove the terminal that `sessions export ID` printed it to."""
    math = r"$\frac{1}{2} + \{a, b\} \, x_1 * y_1$ and $$\sum_{i=1}^n i \\ j$$"
    store = SessionStore(memory=True)
    sid = record(store, with_texts("q", [math, "red: \x1b[31m, bell: \x07, nul: \x00, C1: \x9b2J"], "a"))
    markdown = render_session(store, sid, "md")
    assert f"> {math}" in markdown
    assert not [ch for ch in markdown if unicodedata.category(ch) == "Cc" and ch != "\n"]
    assert "red: \ufffd\\[31m, bell: \ufffd, nul: \ufffd, C1: \ufffd2J" in markdown


def test_dollars_around_a_link_or_code_do_not_make_them_live() -> None:
    """Math is left as written, so `$![x](http://...)$` was an image the viewer fetched from the web and
    `$`x`$` a code span: a span that LaTeX would not write that way is escaped as the text around it is."""
    for text in ["$![pixel](http://tracker.example/p.png)$", "$[x](javascript:1)$", "$`code`$ and $$ ``` $$"]:
        seen, tags = shown(f"> {literal_text(text)}")
        assert tags == {"blockquote", "p"}, (text, VIEWER.render(literal_text(text)))
        assert seen == text


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)  # what SQLite's TEXT keeps: no surrogates


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(questions=st.lists(TEXT.filter(str.strip), min_size=1, max_size=3), texts=st.lists(TEXT, min_size=1,
                                                                                          max_size=4), answer=TEXT)
def test_json_export_import_export_is_the_same_conversation(tmp_path: Path, questions: list[str], texts: list[str],
                                                            answer: str) -> None:
    """Any texts, in a conversation of one to three turns: export, import into another database, export again."""
    store, other = SessionStore(memory=True), SessionStore(memory=True)
    previous = None
    for turn, question in enumerate(questions):
        sent = () if previous is None else (*history(store, previous), (store.get_session(previous)["question"],
                                                                        store.get_session(previous)["answer"] or ""))
        previous = record(store, with_texts(question, texts, f"{answer} {turn}", sent, seed=turn), previous)
    first = export_session(store, previous, "json", tmp_path / "one.json")
    new_id = import_session(other, first)
    second = json.loads(render_session(other, new_id, "json"))
    assert second == json.loads(first.read_text(encoding="utf-8"))
    assert other.get_session(new_id)["turn"] == len(questions)
    assert render_session(other, new_id, "md") == render_session(store, previous, "md")


def test_the_page_wraps_a_word_longer_than_the_page() -> None:
    """pre-wrap breaks only between words: a 200 kB step with no space (a run of digits, a URL, base64) made the
    page 1.6 million pixels wide in a browser; each block of model text may break anywhere."""
    store = SessionStore(memory=True)
    sid = record(store, with_texts("q", ["7" * 200_000, "short"], "a"))
    page = render_session(store, sid, "html")
    style = re.search(r"<style>(.*?)</style>", page, re.DOTALL).group(1)
    rules = {selector.strip(): body for selector, body in re.findall(r"([^{}]+)\{([^}]*)\}", style)}
    assert "overflow-wrap:anywhere" in rules["pre"] and "overflow-wrap:anywhere" in rules["td,th"]
    assert '<pre dir="auto">' + '7' * 200_000 + '</pre>' in page  # whole on the page, not cut


def test_the_page_holds_no_control_character_and_its_data_keeps_them() -> None:
    """A NUL in the page is a parse error a browser drops unseen (ESC, BEL, C1's are errors too); the page shows
    U+FFFD where the model wrote one, and its embedded data, which `sessions import` can be fed, keeps the text."""
    store = SessionStore(memory=True)
    texts = ["nul \x00, esc \x1b[31m, bell \x07, del \x7f, csi \x9b2J", "plain"]
    sid = record(store, with_texts("q", texts, "a"))
    page = render_session(store, sid, "html")
    assert not [ch for ch in page if unicodedata.category(ch) == "Cc" and ch not in "\n\t"]
    assert '<pre dir="auto">nul \ufffd, esc \ufffd[31m, bell \ufffd, del \ufffd, csi \ufffd2J</pre>' in page
    data = re.search(r'<script type="application/json"[^>]*>(.*?)</script>', page).group(1)
    assert json.loads(data)["candidates"][0]["text"] == texts[0]


def test_a_score_that_is_not_a_number_leaves_the_json_export_json(tmp_path: Path) -> None:
    """Before, a NaN verifier score was written as NaN, which is not JSON: jq and JavaScript's JSON.parse refused
    the export. Such a score is written as null (as the HTML page's data already was), and the file imports."""
    def nan_scores():
        for event in with_texts("q", ["a step"], "7"):
            if isinstance(event, ev.CandidateScored):
                event = dataclasses.replace(event, score=math.nan)
            yield event

    store, other = SessionStore(memory=True), SessionStore(memory=True)
    sid = record(store, nan_scores())
    path = export_session(store, sid, "json", tmp_path / "nan.json")

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    data = json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)
    new_id = import_session(other, path)
    assert json.loads(render_session(other, new_id, "json")) == data
    assert "7" in render_session(other, new_id, "md")
