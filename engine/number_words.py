"""Numbers written in English words ("eighteen", "twenty-one", "one hundred and five", "a dozen", "two thirds").

engine/answers.py reads them only where a solution states its answer ("The answer is eighteen."): anywhere
else in a text, "one of the trains" is not the number 1.
"""

from __future__ import annotations

import re
from fractions import Fraction

_SMALL = {word: value for value, word in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_TENS = {word: 10 * value for value, word in enumerate(
    "twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9}
_PARTS = {"half": 2, "halves": 2, "third": 3, "thirds": 3, "quarter": 4, "quarters": 4, "fourth": 4, "fourths": 4,
          "fifth": 5, "fifths": 5, "sixth": 6, "sixths": 6, "seventh": 7, "sevenths": 7, "eighth": 8, "eighths": 8,
          "ninth": 9, "ninths": 9, "tenth": 10, "tenths": 10}
_WORD = re.compile(r"[a-z]+")
_SEPARATOR = re.compile(r"[\s-]+")
_ENDS = re.compile(r"\s*(?:[a-z]+\s*)?(?:[.,;:!?)*]|$)")  # what may follow: nothing, punctuation, or one unit word


def spelled_number(text: str) -> Fraction | None:
    """The number that `text` opens with, written in words, when that is all it states; else None.

    All it states: the words are followed by nothing, by punctuation, or by one more word and then those
    ("eighteen apples.", "twenty-one, since ..."), so "one of the trains" is not 1 and "one half" is 1/2.
    """
    words, end = _leading_words(text.lower())
    value = _value(words)
    if value is None or not _ENDS.match(text.lower(), end):
        return None
    return value


def _leading_words(text: str) -> tuple[list[str], int]:
    """The words at the start of `text` that can belong to a number, and where the last of them ends."""
    words: list[str] = []
    position = scan = len(text) - len(text.lstrip())
    while (match := _WORD.match(text, scan)) and _is_number_word(match.group(0), words):
        words.append(match.group(0))
        position = match.end()
        gap = _SEPARATOR.match(text, position)
        if gap is None:
            break
        scan = gap.end()
    return words, position


def _is_number_word(word: str, before: list[str]) -> bool:
    if word in ("minus", "negative"):
        return not before
    if word in ("a", "an"):
        return not before or before[-1] == "and"
    return word in _SMALL or word in _TENS or word in _SCALES or word in _PARTS or word in ("hundred", "dozen", "and")


def _value(words: list[str]) -> Fraction | None:
    """The value of number words in order, or None when they do not make one number ("one two", "a")."""
    sign = -1 if words[:1] in (["minus"], ["negative"]) else 1
    words = words[1:] if sign == -1 else words
    if words and words[-1] in _PARTS:
        return _with_parts(words, sign)
    whole = _whole(words)
    return None if whole is None else sign * Fraction(whole)


def _with_parts(words: list[str], sign: int) -> Fraction | None:
    """ "two thirds" -> 2/3, "a half" -> 1/2, "one and a half" -> 3/2; "one thirds", "half" alone -> None."""
    denominator = _PARTS[words[-1]]
    if words[-3:-1] in (["and", "a"], ["and", "an"]) and words[-1] in ("half", "quarter", "third"):
        whole = _whole(words[:-3])
        return None if whole is None else sign * (whole + Fraction(1, denominator))
    count = 1 if words[:-1] in (["a"], ["an"]) else _whole(words[:-1])
    if count is None or count == 0 or words[-1].endswith("s") != (count > 1):
        return None
    return sign * Fraction(count, denominator)


def _whole(words: list[str]) -> int | None:
    """'three hundred and twenty-five' -> 325, 'a dozen' -> 12, 'two thousand' -> 2000; None for no number."""
    total, group, last, scale_seen = 0, 0, None, None
    for index, word in enumerate(words):
        following = words[index + 1] if index + 1 < len(words) else None
        if word in ("a", "an"):
            if following not in ("hundred", "dozen", *_SCALES) or last not in (None, "and"):
                return None
            group, last = 1, "small"
        elif word == "and":
            if last not in ("hundred", "scale") or following is None:
                return None
            last = "and"
        elif word in _SMALL:
            if last in ("small", "dozen") or (last == "tens" and not 0 < _SMALL[word] < 10):
                return None
            if word == "zero" and len(words) > 1:
                return None
            group, last = group + _SMALL[word], "small"
        elif word in _TENS:
            if last in ("small", "tens", "dozen"):
                return None
            group, last = group + _TENS[word], "tens"
        elif word == "hundred":
            if last not in ("small", "tens") or not 0 < group < 100:
                return None
            group, last = group * 100, "hundred"
        elif word == "dozen":
            if last != "small" or following is not None:
                return None
            group, last = group * 12, "dozen"
        elif word in _SCALES:
            if last in (None, "and", "scale") or (scale_seen is not None and _SCALES[word] >= scale_seen):
                return None
            total, group, last, scale_seen = total + group * _SCALES[word], 0, "scale", _SCALES[word]
        else:
            return None
    return None if last in (None, "and") else total + group
