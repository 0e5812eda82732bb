"""Final answers: pulling the answer out of a solution's text, and comparing two answers.

The one place that knows how answers are written: `\\boxed{...}`, "The answer is ...", GSM8K's
"#### N", and, failing those, the last number in the text. A stated answer that is LaTeX stays
text, unless it is a number in LaTeX's dress (`\\frac{1}{2}`, `\\$5`, `5\\%`, `\\text{5 apples}`). Numbers are
normalised (thousands separators, a trailing ".0", a leading "+", a fraction in lowest terms) so "1,200",
"1200.0" and "1200" vote together, and compared by value, so "1/2" and "0.5" are the same answer.
"""

from __future__ import annotations

import re
from fractions import Fraction

_NUMBER = r"[-+]?\$?\d[\d,]*(?:\.\d+)?(?:/\d+)?|[-+]?\.\d+"  # "3/4" is one number, not 3
_BOXED = re.compile(r"\\boxed\s*\{")
_STATED = re.compile(r"(?:the\s+(?:final\s+)?answer\s+is|answer\s*:)\s*:?\s*(.+)", re.IGNORECASE)
_HASHES = re.compile(r"####\s*(.+)")
_ANY_NUMBER = re.compile(_NUMBER)
_LATEX_FRACTION = re.compile(r"\\[dt]?frac\s*\{\s*([-+]?\d+)\s*\}\s*\{\s*(\d+)\s*\}")
_LATEX_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
_LATEX_MARKS = re.compile(r"\\[,!; ()\[\]]|\\q?quad\b")  # thin spaces and the \( \) \[ \] math delimiters
_MINUS = "\u2212"  # the Unicode minus sign some models write
_WORKED = re.compile(r"\s*[-+]?\$?\d[\d,.]*\s*[-+*/×÷^x]\s*[-+]?\$?\d[^=]*=")  # "7 + 7 = 14": worked out


def normalize_number(text: str) -> str | None:
    """'1,200.00' -> '1200', '$5' -> '5', '-3.50' -> '-3.5', '6/4' -> '3/2'; None when `text` holds no number."""
    match = _ANY_NUMBER.search(text.replace(_MINUS, "-"))
    if match is None:
        return None
    raw = match.group(0).replace(",", "").replace("$", "").lstrip("+")
    if "/" in raw:
        return _fraction(raw)
    if "." in raw:
        raw = raw.rstrip("0").rstrip(".") or "0"
    if raw.startswith("-") and raw.strip("-0.") == "":
        raw = "0"
    if raw.startswith(("-.", ".")):
        raw = raw.replace(".", "0.", 1)
    return raw


def _fraction(raw: str) -> str:
    """'6/4' -> '3/2', '4/2' -> '2'; a zero denominator leaves the text as written."""
    try:
        value = Fraction(raw)
    except ZeroDivisionError:
        return raw
    return str(value)


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
    numbers = _ANY_NUMBER.findall(text.replace(_MINUS, "-"))
    return normalize_number(numbers[-1]) if numbers else None


def _last(pattern: re.Pattern[str], text: str) -> str | None:
    matches = pattern.findall(text)
    return matches[-1].splitlines()[0] if matches else None


def _clean(found: str) -> str:
    """A stated answer: its first number, unless it is LaTeX (a fraction is not its numerator); a sum worked out
    ("7 + 7 = 14") states what follows its last "="."""
    found = _plain_latex(found.replace(_MINUS, "-"))
    if _WORKED.match(found):
        found = found.rsplit("=", 1)[1]
    number = None if "\\" in found else normalize_number(found)
    if number is not None:
        return number
    return found.strip().rstrip(".").strip().lower()


def _plain_latex(text: str) -> str:
    """A number's LaTeX dress taken off: \\frac{1}{2} -> 1/2, \\$5 -> $5, 5\\% -> 5%, \\text{5 apples} -> 5 apples,
    1\\,000 -> 1000, \\( 18 \\) -> 18; other LaTeX (\\sqrt{2}, \\pi) stays, so the answer stays text."""
    text = _LATEX_FRACTION.sub(r"\1/\2", text)
    text = _LATEX_WRAPPER.sub(r"\1", text)
    text = _LATEX_MARKS.sub("", text)
    return text.replace("\\$", "$").replace("\\%", "%")


def same_answer(predicted: str | None, expected: str) -> bool:
    """Whether a predicted answer equals the expected one (numbers compared by value)."""
    if predicted is None:
        return False
    want = _clean(expected)
    if predicted == want:
        return True
    try:
        return Fraction(predicted) == Fraction(want)
    except (ValueError, ZeroDivisionError):
        return False
