"""Cutting text for a line without breaking a character a reader sees as one (a grapheme cluster): a letter and
its combining accent (e + ◌́ written apart), a Devanagari conjunct (क्ष), a flag (two regional indicators), an
emoji with its skin tone or joined by zero-width joiners (👨‍👩‍👧), Hangul written as jamo. A cut between them
showed a bare letter, half a flag (a lone letter box) or a different emoji before the '…'.

The rules are Unicode's extended grapheme clusters (UAX #29) that occur in questions and answers, without the
rare ones (prepended marks, emoji-only joins): close enough for choosing where to cut."""

from __future__ import annotations

import unicodedata

ZWJ = "\u200d"
VIRAMA = 9  # the canonical combining class of a virama (halant): the consonant after it joins the conjunct


def _regional(ch: str) -> bool:
    return "\U0001f1e6" <= ch <= "\U0001f1ff"


def joins_previous(text: str, i: int) -> bool:
    """Whether `text[i]` belongs to the cluster `text[i - 1]` is in (no cut may fall between them)."""
    ch, prev = text[i], text[i - 1]
    if unicodedata.category(ch) in ("Mn", "Mc", "Me") or ch == ZWJ or prev == ZWJ:
        return True
    if "\U0001f3fb" <= ch <= "\U0001f3ff" or "\U000e0020" <= ch <= "\U000e007f":  # skin tone, a flag's tags
        return True
    if unicodedata.combining(prev) == VIRAMA and unicodedata.category(ch) == "Lo":
        return True
    if "\u1160" <= ch <= "\u11ff" and "\u1100" <= prev <= "\u11ff":  # a Hangul vowel or final jamo
        return True
    if prev == "\r" and ch == "\n":
        return True
    if _regional(ch) and _regional(prev):  # pairs from the first: the second of a pair joins its first
        run = 0
        while i - 1 - run >= 0 and _regional(text[i - 1 - run]):
            run += 1
        return run % 2 == 1
    return False


def cut(text: str, limit: int) -> str:
    """The longest start of `text` of at most `limit` characters that ends between two clusters."""
    if len(text) <= limit:
        return text
    end = max(limit, 0)
    while end > 0 and joins_previous(text, end):
        end -= 1
    return text[:end]


def shorten(text: str, limit: int, mark: str = "…") -> str:
    """`text` whole when it has at most `limit` characters, else cut (`cut`) to end in `mark` within `limit`."""
    return text if len(text) <= limit else cut(text, limit - len(mark)) + mark

