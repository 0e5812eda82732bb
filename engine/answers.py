"""Final answers: pulling the answer out of a solution's text, and comparing two answers.

The one place that knows how answers are written: `\\boxed{...}`, "The answer is ...", GSM8K's
"#### N", and, failing those, the last number in the text. A stated answer that is LaTeX stays
text. Numbers are normalised (thousands separators, a trailing ".0", a leading "+") so "1,200",
"1200.0" and "1200" vote together.
"""

from __future__ import annotations

import re

_NUMBER = r"[-+]?\$?\d[\d,]*(?:\.\d+)?|[-+]?\.\d+"
_BOXED = re.compile(r"\\boxed\s*\{")
_STATED = re.compile(r"(?:the\s+(?:final\s+)?answer\s+is|answer\s*:)\s*:?\s*(.+)", re.IGNORECASE)
_HASHES = re.compile(r"####\s*(.+)")
_ANY_NUMBER = re.compile(_NUMBER)


def normalize_number(text: str) -> str | None:
    """'1,200.00' -> '1200', '$5' -> '5', '-3.50' -> '-3.5'; None when `text` holds no number."""
    match = _ANY_NUMBER.search(text)
    if match is None:
        return None
    raw = match.group(0).replace(",", "").replace("$", "").lstrip("+")
    if "." in raw:
        raw = raw.rstrip("0").rstrip(".") or "0"
    if raw.startswith("-") and raw.strip("-0.") == "":
        raw = "0"
    if raw.startswith(("-.", ".")):
        raw = raw.replace(".", "0.", 1)
    return raw


def _boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}`, braces balanced."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    depth, start = 1, starts[-1]
    for index in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return text[start:index]
    return text[start:]


def extract_answer(text: str) -> str | None:
    """The answer a solution states, normalised; None when it states none.

    Order: the last `\\boxed{}`, the last "The answer is" / "Answer:" line, "#### N", then the
    last number anywhere. A stated answer that is a number is normalised; other text is kept,
    lower-cased and stripped of a final full stop.
    """
    for found in (_boxed(text), _last(_STATED, text), _last(_HASHES, text)):
        if found is not None and found.strip():
            return _clean(found)
    numbers = _ANY_NUMBER.findall(text)
    return normalize_number(numbers[-1]) if numbers else None


def _last(pattern: re.Pattern[str], text: str) -> str | None:
    matches = pattern.findall(text)
    return matches[-1].splitlines()[0] if matches else None


def _clean(found: str) -> str:
    """A stated answer: its first number, unless it is LaTeX (a fraction is not its numerator)."""
    number = None if "\\" in found else normalize_number(found)
    if number is not None:
        return number
    return found.strip().rstrip(".").strip().lower()


def same_answer(predicted: str | None, expected: str) -> bool:
    """Whether a predicted answer equals the expected one (numbers compared by value)."""
    if predicted is None:
        return False
    want = _clean(expected)
    if predicted == want:
        return True
    try:
        return abs(float(predicted) - float(want)) < 1e-9
    except ValueError:
        return False
