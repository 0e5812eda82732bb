"""Answer extraction (engine/answers.py) and the final selection (best, majority, weighted vote)."""

from __future__ import annotations

import pytest

from engine.answers import extract_answer, normalize_number, same_answer
from engine.candidate import Candidate
from engine.methods.selection import choose, final_pool


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("12 + 30 = 42\n\nThe answer is: 42", "42"),
        ("So the total is \\boxed{1,200} dollars. The answer is 7", "1200"),  # boxed wins
        ("first 3, then \\boxed{\\frac{1}{2}}", "1/2"),  # LaTeX's dress off a number, so it votes with "1/2"
        ("\\boxed{\\sqrt{2}}", "\\sqrt{2}"),  # other LaTeX stays text
        ("He pays $15.50 in all.\nThe answer is $15.50.", "15.5"),
        ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "72"),
        ("She has 5 apples and eats 2, so 3 are left", "3"),
        ("The answer is -4", "-4"),
        ("The final answer is 18.0", "18"),
        ("Answer: blue.", "blue"),
        ("The answer is 7 + 7 = 14.", "14"),  # a sum worked out states its result, not its first term
        ("The answer is $3 x 4 = $12", "12"),
        ("The answer is 12. Check: 12*3 = 36", "12"),  # the answer comes first: no sum to work out
        ("The answer is x = 5", "5"),
        ("no numbers here", None),
        ("", None),
    ],
)
def test_extracts_the_stated_answer(text, answer):
    assert extract_answer(text) == answer


def test_numbers_normalise_and_compare_by_value():
    assert normalize_number("1,000.00") == "1000"
    assert normalize_number("+7") == "7"
    assert normalize_number("-0.0") == "0"
    assert same_answer("72", "72") and same_answer("72", "72.0") and same_answer("1200", "1,200")
    assert not same_answer(None, "3") and not same_answer("4", "3")


@pytest.mark.parametrize(
    ("text", "expected", "same"),
    [
        ("The answer is 1/3", "1/2", False),  # both were read as their numerator, 1: judged right
        ("The answer is 3", "3/4", False),
        ("The answer is 1/2", "0.5", True),
        ("\\boxed{\\frac{1}{2}}", "0.5", True),  # the LaTeX fraction stayed text: judged wrong
        ("\\boxed{\\dfrac{6}{8}}", "3/4", True),
        ("\\boxed{-\\frac{1}{2}}", "-0.5", True),
        ("\\boxed{\\$18}", "18", True),
        ("\\boxed{5\\%}", "5", True),
        ("\\boxed{\\text{12 apples}}", "12", True),
        ("\\boxed{1\\,000}", "1,000", True),
        ("The answer is \\( 18 \\).", "18", True),  # the math delimiters kept it LaTeX text: judged wrong
        ("The answer is \\[18\\]", "18", True),
        ("The answer is \u22125", "-5", True),  # a Unicode minus was dropped: -5 read as 5
        ("The answer is \u22125", "5", False),
    ],
)
def test_fractions_latex_numbers_and_unicode_minus_are_judged_by_value(text, expected, same):
    assert same_answer(extract_answer(text), expected) is same


def _paths(*specs):
    return [
        Candidate(i + 1, None, 1, text=text, aggregate=score, finished=True) for i, (text, score) in enumerate(specs)
    ]


def _text(c):
    return c.text


def test_best_takes_the_highest_score():
    pool = _paths(("The answer is 5", 0.9), ("The answer is 6", 0.4), ("The answer is 6", 0.3))
    assert choose(pool, "best", _text).id == 1


def test_majority_takes_the_commonest_answer_and_its_best_path():
    pool = _paths(("The answer is 5", 0.9), ("The answer is 6", 0.3), ("The answer is 6.0", 0.4))
    assert choose(pool, "majority", _text).id == 3


def test_weighted_adds_scores_per_answer():
    pool = _paths(("The answer is 5", 0.9), ("The answer is 6", 0.3), ("The answer is 6", 0.4))
    assert choose(pool, "weighted", _text).id == 1  # 0.9 > 0.7
    pool = _paths(("The answer is 5", 0.6), ("The answer is 6", 0.35), ("The answer is 6", 0.4))
    assert choose(pool, "weighted", _text).id == 3  # 0.75 > 0.6


def test_votes_fall_back_to_best_without_answers_and_finished_paths_come_first():
    pool = _paths(("hmm", 0.2), ("no idea", 0.7))
    assert choose(pool, "majority", _text).id == 2
    unfinished = Candidate(9, None, 1, text="The answer is 1", aggregate=1.0)
    assert [c.id for c in final_pool([unfinished, *pool])] == [1, 2]
    assert [c.id for c in final_pool([unfinished])] == [9]
    with pytest.raises(ValueError, match="use best, majority or weighted"):
        choose(pool, "mode", _text)
