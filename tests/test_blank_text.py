"""A text shows nothing when it is whitespace, control characters, Unicode's default-ignorable code points or the
blank braille cell: such a question (engine, remote, an eval problem) is refused as empty. Drawn format characters
(prepended concatenation marks), a joined emoji family and ordinary text are not blank."""

from __future__ import annotations

import pytest

from app.problems import ProblemsError, load_problems
from engine.blank_text import DEFAULT_IGNORABLE, is_blank
from engine.config import CacheConfig, SearchConfig
from engine.remote_search import run as run_remote
from engine.search import run
from tests.fake_openai import closed_port
from tests.test_remote import config

# missed before (not whitespace, not Cf): variation selectors, the combining grapheme joiner, the Hangul fillers,
# the blank braille cell, control characters
MISSED = ["\ufe0f", "\ufe00", "\U000e0100", "\u034f", "\u115f", "\u1160", "\u3164", "\uffa0", "\u2800", "\x00",
          "\x1b", "\x7f", "\x85", "\u180b", "\u17b4", "\U0001d173", "\U0001bca0", "\ufff0"]
FORMAT = ["\u00ad", "\u061c", "\u180e", "\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u202a", "\u202e",
          "\u2060", "\u2066", "\u206f", "\ufeff", "\U000e0001", "\U000e0020", "\U000e007f", "\U000e0fff"]
SPACE = ["", " ", "\t\n", "\xa0", "\u3000", "\u2028", " \u200b\ufe0f\x00\u2800 "]
PREPENDED_MARKS = ["\u0600", "\u0601", "\u0602", "\u0603", "\u0604", "\u0605", "\u06dd", "\u070f", "\u0890",
                   "\u0891", "\u08e2", "\U000110bd", "\U000110cd"]
SHOWN = ["a", "2+3?", "\u0627", "\u0915\u094d\u0937", "\U0001f468\u200d\U0001f469\u200d\U0001f467",
         "\u2764\ufe0f", "\u200bWhat is 2+3?", "\U0001f1eb\U0001f1f7", "\u2801", "\u3163", "\u0660"]


@pytest.mark.parametrize("text", MISSED + FORMAT + SPACE)
def test_invisible_characters_alone_are_blank(text: str) -> None:
    assert is_blank(text)


@pytest.mark.parametrize("text", PREPENDED_MARKS + SHOWN)
def test_drawn_format_marks_emoji_families_and_ordinary_text_are_not_blank(text: str) -> None:
    assert not is_blank(text)


def test_the_ranges_are_unicodes_default_ignorable_code_points() -> None:
    """Checked against a second reader of Unicode's data where one is installed (the regex package)."""
    regex = pytest.importorskip("regex")
    ignorable = regex.compile(r"\p{Default_Ignorable_Code_Point}")
    ours = {code for first, last in DEFAULT_IGNORABLE for code in range(first, last + 1)}
    assert ours == {code for code in range(0x110000) if ignorable.match(chr(code))}


@pytest.mark.parametrize("question", ["\u200b", "\ufe0f", "\u3164", "\u2800\x00"])
def test_the_search_refuses_an_invisible_question_as_empty(tiny, question: str) -> None:
    events = list(run(question, tiny, SearchConfig(beams=2, width=2, max_steps=2), CacheConfig()))
    assert [e.type for e in events] == ["run_failed"] and events[0].error == "InvalidPrompt"
    assert events[0].message.startswith("The question is empty.")


def test_the_remote_search_refuses_an_invisible_question_before_asking_the_server() -> None:
    events = list(run_remote("\u200b\ufe0f", config(f"http://127.0.0.1:{closed_port()}"), SearchConfig()))
    assert [e.type for e in events] == ["run_failed"] and events[0].error == "InvalidPrompt"
    assert events[0].message.startswith("The question is empty.")


@pytest.mark.parametrize(("row", "missing"), [
    ('{"question": "\\u200b", "answer": 5}', "question"),
    ('{"question": "\\u3164\\ufe0f", "answer": "5"}', "question"),
    ('{"question": "What is 2+3?", "answer": "\\u200b"}', "answer"),
])
def test_an_eval_problem_with_an_invisible_question_is_refused_as_an_empty_one(tmp_path, row: str,
                                                                                missing: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"question": "What is 1+1?", "answer": 2}\n' + row + "\n", encoding="utf-8")
    with pytest.raises(ProblemsError, match=rf"p\.jsonl:2: the row has no {missing}\.$"):
        load_problems(path)
