"""Final answers: pulling the answer out of a solution's text, and comparing two answers.

The one place that knows how answers are written: `\\boxed{...}`, "The answer is ...", GSM8K's
"#### N", and, failing those, the last number in the text. A stated answer that is LaTeX stays
text, unless it is a number in LaTeX's dress (`\\frac{1}{2}`, `\\$5`, `5\\%`, `\\text{5 apples}`). Numbers are
normalised (thousands separators, Indian grouping "1,00,000" too, a trailing ".0", a leading "+", a fraction in
lowest terms, digits of any script as ASCII: "١٢", "１２") so "1,200", "1 200", "1200.0" and "1200" vote
together, and compared by value, so "1/2" and "0.5" are the same answer.
A number is also read in scientific form ("2.5e-3", "2.5 \\times 10^{3}") and as a mixed number ("1 1/2");
a stated answer may be in words ("The answer is eighteen.", engine/number_words.py), other text may not.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal
from fractions import Fraction

from engine.number_words import spelled_number

_MIXED = r"\d+ [1-9]\d*/\d+"  # "1 1/2" is one and a half (a fraction that is not proper makes it two numbers)
_SPACED = r"\d{1,3}(?: \d{3})+(?![\d/])(?:\.\d+)?"  # "1 000": groups of exactly three digits after one of 1-3
_INDIAN = r"\d{1,2}(?:,\d{2})+,\d{3}(?!\d)"  # "1,00,000" (a lakh), "1,50,00,000": thousands, then pairs
_THOUSANDS = r"\d{1,3}(?:,\d{3})+(?!\d)"  # "1,200"
_PLAIN = rf"(?:{_INDIAN}|{_THOUSANDS}|\d+)(?:\.\d+)?(?:[eE][-+]?\d{{1,3}}(?!\d)|/\d+)?"  # 3/4 (not 3); 2.5e-3
_NUMBER = rf"[-+]?\$?(?:{_MIXED}|{_SPACED}|{_PLAIN})|[-+]?\.\d+(?:[eE][-+]?\d{{1,3}}(?!\d))?"
_BOXED = re.compile(r"\\boxed\s*\{")
_STATED = re.compile(r"(?:the\s+(?:final\s+)?answer\s+is|answer\s*:)\s*:?\s*(.+)", re.IGNORECASE)
_HASHES = re.compile(r"####\s*(.+)")
_ANY_NUMBER = re.compile(_NUMBER)
_TIMES_TEN = re.compile(r"(?<=\d)\s*(?:\\times|\\cdot|×|·|\*| x )\s*10\s*\^\s*\{?\s*([-+]?\d{1,3})\s*\}?")
_LATEX_FRACTION = re.compile(r"\\[dt]?frac\s*(?:\{\s*([-+]?\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))")  # \frac34 too
_LATEX_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_LATEX_MARKS = re.compile(r"\\[,!; ()\[\]]|\\q?quad\b|\\left\b|\\right\b|\^\s*\{?\s*\\circ\s*\}?")  # \, \( ^\circ
_LATEX_OPERATORS = {"\\times": "×", "\\cdot": "*", "\\div": "÷", "{,}": ","}  # "1{,}000": a comma in math mode
# Unicode some models write: the minus sign, the fraction slash, no-break, thin and narrow no-break spaces, and
# Arabic's decimal and thousands separators ("12٫5", "1٬200")
_LOOKALIKES = str.maketrans({"\u2212": "-", "\u2044": "/", "\u00a0": " ", "\u2009": " ", "\u202f": " ",
                             "\u066b": ".", "\u066c": ","})
_DIGIT = re.compile(r"(?![0-9])\d")  # a digit of another script: Arabic-Indic "١٢", full-width "１２", Devanagari "१२"
_VULGAR = re.compile("[½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅛⅜⅝⅞]")  # "1½" is one and a half
_SCALE_WORDS = re.compile(r"(?<=\d)\s*(thousand|million|billion)\b", re.IGNORECASE)  # "1.5 million"
_SCALES = {"thousand": "e3", "million": "e6", "billion": "e9"}
_LIST = re.compile(rf"([(\[]?)\s*((?:{_NUMBER})(?:\s*[,;]\s*(?:{_NUMBER}))+)\s*([)\]]?)\.?")  # "(2, 3)", "1, 4, 9"
_WORKED = re.compile(r"\s*[-+]?\$?\d[\d,.]*\s*[-+*/×÷^x]\s*[-+]?\$?\d[^=]*=")  # "7 + 7 = 14": worked out


def normalize_number(text: str) -> str | None:
    """'1,200.00' -> '1200', '$5' -> '5', '-3.50' -> '-3.5', '6/4' -> '3/2', '1 000' -> '1000', '2.5e-3' ->
    '0.0025', '1 1/2' -> '3/2'; None when `text` holds no number."""
    numbers = _numbers(text)
    return _normal(numbers[0]) if numbers else None


def _numbers(text: str) -> list[str]:
    """The numbers of `text` as written, in order. '3 4/2' is two numbers: a mixed number's fraction is proper."""
    numbers = []
    text = _powers_of_ten(_plain_text(text))
    for raw in _ANY_NUMBER.findall(text):
        whole, _, part = raw.rpartition(" ") if "/" in raw else ("", "", raw)
        if whole and not _proper(part):
            numbers += [whole, part]
        else:
            numbers.append(raw)
    return numbers


def _proper(fraction: str) -> bool:
    numerator, denominator = fraction.split("/")
    return int(numerator) < int(denominator)


def _plain_text(text: str) -> str:
    """Unicode's look-alikes as ASCII ('\u2212 5' -> '-5', '1\u2009000' -> '1 000', '1½' -> '1 1/2'), digits of every
    script as ASCII ('١٢', '１２' and '१२' -> '12': the same vote as '12'), and a number's scale word as its power
    of ten ('1.5 million' -> '1.5e6')."""
    text = _DIGIT.sub(_ascii_digit, text.translate(_LOOKALIKES)) if not text.isascii() else text
    text = _SCALE_WORDS.sub(lambda scale: _SCALES[scale.group(1).lower()], text)
    return _VULGAR.sub(lambda part: _after_digit(part) + _vulgar(part.group(0)), text)


def _ascii_digit(match: re.Match[str]) -> str:
    return str(unicodedata.decimal(match.group(0)))


def _vulgar(character: str) -> str:
    return str(Fraction(unicodedata.numeric(character)).limit_denominator(8))


def _after_digit(match: re.Match[str]) -> str:
    """A space when `match` follows a digit: a whole number and a fraction written together are a mixed number."""
    return " " if match.start() > 0 and match.string[match.start() - 1].isdigit() else ""


def _powers_of_ten(text: str) -> str:
    """'2.5 × 10^3', '2.5 \\times 10^{3}' -> '2.5e3', so the number is read whole and not as its exponent."""
    return _TIMES_TEN.sub(r"e\1", text)


def _normal(raw: str) -> str:
    """One number as written ('-$1,200.50', '1 000', '1 1/2', '1e3') in its normal form ('-1200.5', ...)."""
    raw = raw.replace(",", "").replace("$", "").lstrip("+")
    if " " in raw and "/" in raw:
        whole, part = raw.split(" ")
        value = abs(Fraction(whole)) + Fraction(part)
        return str(-value if whole.startswith("-") else value)
    raw = raw.replace(" ", "")
    if "/" in raw:
        return _fraction(raw)
    if "e" in raw.lower():
        raw = format(Decimal(raw), "f")
    if "." in raw:
        raw = raw.rstrip("0").rstrip(".") or "0"
    if raw.startswith("-") and raw.strip("-0.") == "":
        raw = "0"
    sign, digits = ("-", raw[1:]) if raw.startswith("-") else ("", raw)
    digits = digits.lstrip("0") or "0"  # "007" -> "7"; what a leading zero left ("07.5" -> "7.5", ".5")
    if digits.startswith("."):
        digits = "0" + digits
    return sign + digits


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
        answer = None if found is None else _clean(found)
        if answer and any(c.isalnum() for c in answer):  # "The answer is:" cut off states nothing (not ":")
            return answer
    numbers = _numbers(text)
    return _normal(numbers[-1]) if numbers else None


def _last(pattern: re.Pattern[str], text: str) -> str | None:
    matches = pattern.findall(text)
    return matches[-1].splitlines()[0] if matches else None


def _clean(found: str) -> str:
    """A stated answer: its first number, unless it is LaTeX (a fraction is not its numerator); a sum worked out
    ("7 + 7 = 14") states what follows its last "="; a number in words ("eighteen.") when that is all it says."""
    found = _plain_latex(_plain_text(found)).replace("**", "")  # Markdown's bold: "**Answer:** 18"
    if _WORKED.match(found):
        found = found.rsplit("=", 1)[1]
    spelled = spelled_number(found)
    if spelled is not None:
        return str(spelled)
    if listed := _listed(found):
        return listed
    number = None if "\\" in found else normalize_number(found)
    if number is not None:
        return number
    return found.strip().rstrip(".").strip().lower()


def _listed(found: str) -> str | None:
    """A stated answer that is only numbers between commas, '(2,5)' or '1, 4, 9', as '(2, 5)' and '1, 4, 9'; else
    None. It was read as its first number, so "(2, 5)" matched "(2, 3)". '1,000' is one number, not a list."""
    listed = _LIST.fullmatch(found.strip())
    numbers = _ANY_NUMBER.findall(listed.group(2)) if listed else []
    if len(numbers) < 2:
        return None
    return listed.group(1) + ", ".join(_normal(number) for number in numbers) + listed.group(3)


def _plain_latex(text: str) -> str:
    """A number's LaTeX dress taken off: \\frac{1}{2} -> 1/2, \\$5 -> $5, 5\\% -> 5%, \\text{5 apples} -> 5 apples,
    1\\,000 and 1{,}000 -> 1000, 2.5 \\times 10^{3} -> 2.5e3, 45^\\circ -> 45, \\( 18 \\) -> 18; other LaTeX
    (\\sqrt{2}, \\pi) stays, so the answer stays text."""
    text = _LATEX_FRACTION.sub(_slashed, _powers_of_ten(text))
    text = _LATEX_WRAPPER.sub(r"\1", text)
    text = _LATEX_MARKS.sub("", text)
    for latex, plain in _LATEX_OPERATORS.items():
        text = text.replace(latex, plain)
    return text.replace("\\$", "$").replace("\\%", "%")


def _slashed(fraction: re.Match[str]) -> str:
    """\\frac{3}{4} and \\frac34 -> 3/4; after a whole number, 2\\frac{3}{4} -> 2 3/4 (a mixed number, not 23/4)."""
    numerator, denominator = fraction.group(1) or fraction.group(2), fraction.group(3) or fraction.group(4)
    return f"{_after_digit(fraction)}{numerator}/{denominator}"


def answer_key(answer: str) -> str:
    """The form two answers share when they are the same answer: a number as its exact value ('0.5', '1/2' and
    '2/4' -> '1/2'), other text as it is. Majority votes count by it, so "1/2" and "0.5" are one vote."""
    try:
        return str(Fraction(answer))
    except (ValueError, ZeroDivisionError):
        return answer


def same_answer(predicted: str | None, expected: str) -> bool:
    """Whether a predicted answer equals the expected one (numbers compared by value)."""
    return predicted is not None and answer_key(predicted) == answer_key(_clean(expected))
