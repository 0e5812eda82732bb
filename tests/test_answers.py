"""Answer extraction (engine/answers.py) and the final selection (best, majority, weighted vote)."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.answers import answer_key, extract_answer, normalize_number, same_answer
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


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("The answer is 1 000", "1000"),  # a space between thousands
        ("The answer is 1\u2009000.", "1000"),  # a thin space
        ("The answer is 1\u202f000 km", "1000"),  # a narrow no-break space
        ("So she earns 12\u00a0345\u00a0678 in all", "12345678"),  # no-break spaces, in the text's last number
        ("The answer is 10 000.5", "10000.5"),
        ("\\boxed{1{,}000}", "1000"),  # LaTeX's comma in math mode
        ("The answer is 3 4", "3"),  # two numbers: "4" is no group of three digits
        ("The answer is 1234 567", "1234"),  # nor after a first group of four
        ("We count 1 2 3", "3"),
        ("The answer is 1e3", "1000"),
        ("The answer is 2.5e-3", "0.0025"),
        ("so the mass is 2.5E3", "2500"),
        ("\\boxed{2.5 \\times 10^{3}}", "2500"),  # not its exponent, 3
        ("so it is 2.5 × 10^-3", "0.0025"),
        ("The answer is 1 1/2", "3/2"),  # a mixed number
        ("\\boxed{2\\frac{3}{4}}", "11/4"),  # read 23/4 before
        ("\\boxed{-1\\frac{1}{2}}", "-3/2"),
        ("so 3 4/2", "2"),  # not a mixed number: its fraction is not proper
        ("\\boxed{45^\\circ}", "45"),
        ("The answer is 3 \\times 4 = 12", "12"),  # a sum worked out in LaTeX
        ("The answer is 1.5 million", "1500000"),
        ("So the city has 2 Billion people", "2000000000"),
    ],
)
def test_spaced_thousands_scientific_and_mixed_numbers_are_read_whole(text, answer):
    assert extract_answer(text) == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("The answer is eighteen.", "18"),
        ("\\boxed{eighteen}", "18"),
        ("\\boxed{\\text{twenty-one}}", "21"),
        ("#### one hundred", "100"),
        ("The answer is a dozen.", "12"),
        ("The final answer is three hundred and twenty-five apples.", "325"),
        ("The answer is two thousand and twenty-four", "2024"),
        ("The answer is minus five", "-5"),
        ("The answer is two thirds.", "2/3"),
        ("The answer is one and a half", "3/2"),
        ("The answer is eighteen, since 3 * 6 = 18 and 2 more make 20", "18"),
        ("One of the trains left at 3 and the other at 5", "5"),  # words count only where an answer is stated
        ("The answer is one of the trains", "one of the trains"),  # not "one" followed by a unit
        ("The answer is one two.", "one two"),
        ("Answer: A", "a"),  # a choice, not a number
        ("The answer is an integer.", "an integer"),
    ],
)
def test_numbers_in_words_are_read_where_the_answer_is_stated(text, answer):
    assert extract_answer(text) == answer


@pytest.mark.parametrize(
    ("text", "expected", "same"),
    [
        ("The answer is (2, 5)", "(2, 3)", False),  # both were read as their first number, 2: judged right
        ("\\boxed{(2, 3)}", "(2,3)", True),  # "(2,3)" was 23 and "(2, 3)" 2: judged wrong
        ("\\boxed{\\left( 2, \\frac{1}{2} \\right)}", "(2, 0.5)", False),  # a list is compared as written
        ("\\boxed{\\left( 2, \\frac{1}{2} \\right)}", "(2, 1/2)", True),
        ("The answer is 1, 4, 9.", "1,4,9", True),
        ("The answer is 2, 3", "2", False),  # two answers are not the one expected
        ("The answer is 1,000", "1000", True),  # thousands, not a list
        ("The answer is 18, 3 more than 15", "18", True),  # a list only when it is all the answer says
    ],
)
def test_an_answer_of_several_numbers_is_compared_whole(text, expected, same):
    assert same_answer(extract_answer(text), expected) is same


def test_an_expected_answer_in_words_compares_by_value():
    assert same_answer("18", "eighteen") and same_answer("0.5", "one half") and not same_answer("19", "eighteen")


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


@pytest.mark.parametrize(("written", "normal"), [("007", "7"), ("-007.50", "-7.5"), ("000", "0"), ("0.50", "0.5"),
                                             (".5", "0.5"), ("-.5", "-0.5"), ("100", "100")])
def test_leading_zeros_are_not_part_of_a_number(written, normal):
    """Before, 'The answer is 007' was reported as 007 (its vote key was 7, so only the report differed)."""
    assert extract_answer(f"The answer is {written}") == normal


@pytest.mark.parametrize(("text", "expected"), [
    ("So 3 + 4 = 7. The answer is:", "7"),  # a path cut off before its answer: the last number, as with no statement
    ("The answer is.", None), ("Answer: **", None), ("The answer is $", None), ("\\boxed{} so 5", "5"),
])
def test_a_statement_cut_off_before_its_answer_states_nothing(text, expected):
    """Before, 'The answer is:' cut off by the step limit was read as the answer ':' (and 'The answer is.' as ''),
    a vote of its own in a majority and 'answered :' in the eval's table."""
    assert extract_answer(text) == expected


def test_votes_count_an_answer_by_its_value_in_every_form():
    """Before, votes were counted by the answer's text: '1/2', '0.5' and '\\frac{2}{4}' were three answers of
    one vote each, and the lone 0.75 won on its score although three paths said one half."""
    pool = _paths(("The answer is 0.75", 0.9), ("The answer is 1/2", 0.3), ("The answer is 0.5", 0.4),
                  ("\\boxed{\\frac{2}{4}}", 0.25))
    assert choose(pool, "majority", _text).id == 3  # the best-scoring path of the winning answer
    assert choose(pool, "weighted", _text).id == 3  # 0.9 against 0.3 + 0.4 + 0.25
    assert answer_key("0.5") == answer_key("1/2") == "1/2" and answer_key("(2, 5)") == "(2, 5)"


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


# Drawn answers: a number written the ways models write it, stated after a solution's other numbers.

_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
        "seventeen eighteen nineteen".split()
_TENS_WORDS = "twenty thirty forty fifty sixty seventy eighty ninety".split()


def _in_words(n: int) -> str:
    """0 <= n < 1,000,000 in English words, written here apart from engine/number_words.py."""
    if n >= 1000:
        rest = n % 1000
        return f"{_in_words(n // 1000)} thousand" + (f" {_in_words(rest)}" if rest else "")
    if n >= 100:
        rest = n % 100
        return f"{_ONES[n // 100]} hundred" + (f" and {_in_words(rest)}" if rest else "")
    if n >= 20:
        return _TENS_WORDS[n // 10 - 2] + (f"-{_ONES[n % 10]}" if n % 10 else "")
    return _ONES[n]


def _grouped(n: int, separator: str) -> str:
    sign, digits = ("-" if n < 0 else ""), f"{abs(n):,}"
    return sign + digits.replace(",", separator)


def _integer_forms(n: int) -> list[tuple[str, bool]]:
    """(form, plain): plain forms may also stand as a text's last number, without a statement."""
    minus = "\u2212" if n < 0 else ""
    forms = [(str(n), True), (f"{n:,}", True), (f"{n}.0", True), (f"{n:,}.00", True), (f"{n} km/h", True),
             (f"{n} apples", True), (f"{minus}{abs(n)}" if n < 0 else f"+{n}", True), (f"\\text{{{n} apples}}", False),
             (_grouped(n, "{,}"), False), (_grouped(n, "\\,"), False), (f"{n}\\%", False), (f"{n}%", True)]
    forms += [(_grouped(n, space), True) for space in (" ", "\u2009", "\u202f", "\u00a0")]
    forms += [(f"-${abs(n):,}", True) if n < 0 else (f"${n:,}", True), (f"\\${n}", False), (f"**{n}**", False),
              (f"${n}$", False), (f"x = {n}", False), (f"\\mathbf{{{n}}}", False), (f"{n} \\text{{ km/h}}", False),
              (f"{n}\\,\\mathrm{{cm}}^2", False), (f"\\({n}\\)", False)]
    if abs(n) < 1_000_000:
        words = _in_words(abs(n))
        forms += [(words, False), (f"**{words.capitalize()}**", False)] if n >= 0 else [(f"minus {words}", False)]
    if abs(n) >= 10**6 and n % 10**5 == 0:
        forms.append((f"{Decimal(n) / 10**6} million", True))
    if n in (12, 24):
        forms.append(("a dozen" if n == 12 else "two dozen", False))
    if n and n % 100 == 0:
        mantissa, exponent = n, 0
        while mantissa % 10 == 0:
            mantissa, exponent = mantissa // 10, exponent + 1
        forms += [(f"{mantissa}e{exponent}", True), (f"{mantissa} \\times 10^{{{exponent}}}", False),
                  (f"{mantissa} × 10^{exponent}", True), (f"{mantissa}E+{exponent}", True),
                  (f"{mantissa} \\cdot 10^{exponent}", False)]
    return forms


def _fraction_forms(value: Fraction) -> list[tuple[str, bool]]:
    """(form, plain) of a fraction that is not whole: slashes, LaTeX, mixed numbers, decimals, words, ½."""
    p, q, sign = abs(value.numerator), value.denominator, "-" if value < 0 else ""
    forms = [(f"{sign}{p}/{q}", True), (f"{sign}\\frac{{{p}}}{{{q}}}", False), (f"{sign}\\dfrac{{{p}}}{{{q}}}", False),
             (f"\\frac{{{sign}{p}}}{{{q}}}", False)]
    if p > q:
        forms += [(f"{sign}{p // q} {p % q}/{q}", True), (f"{sign}{p // q}\\frac{{{p % q}}}{{{q}}}", False)]
    if 10**6 % q == 0:
        forms.append((f"{sign}{Decimal(p) / Decimal(q)}", True))
    if 100 % q == 0:
        forms.append((f"{sign}${Decimal(p) / Decimal(q):.2f}", True))
    if p < 10 and q < 10:
        forms += [(f"{sign}\\frac{p}{q}", False), (f"{sign}\\tfrac{{{p}}}{q}", False)]
    forms += [(f"\u2212\\frac{{{p}}}{{{q}}}", False)] if sign else []
    forms += [(f"{sign}{p}\u2044{q}", True)]  # the fraction slash
    if not sign and q in (2, 3, 4) and p < 20:  # "one half", "three halves", "five quarters"
        part = {2: ("half", "halves"), 3: ("third", "thirds"), 4: ("quarter", "quarters")}[q][p > 1]
        forms.append((f"{_in_words(p)} {part}", False))
    vulgar = {Fraction(1, 2): "½", Fraction(1, 4): "¼", Fraction(3, 4): "¾", Fraction(1, 3): "⅓", Fraction(2, 3): "⅔"}
    if Fraction(p % q, q) in vulgar:
        forms += [(f"{sign}{p // q or ''}{vulgar[Fraction(p % q, q)]}", True)]
    return forms


_STATEMENTS = ["The answer is {}.", "The final answer is {}", "Answer: {}", "#### {}", "\\boxed{{{}}}",
               "Therefore the answer is $\\boxed{{{}}}$.", "**Answer:** {}", "The answer is: {}\nI hope it helps."]


@st.composite
def _solutions(draw):
    """(a solution's text, the value it states): an integer or a fraction in one of its forms, after some work."""
    if draw(st.booleans()):
        round_ones = st.builds(lambda k, zeros: k * 10**zeros, st.integers(-99, 99), st.integers(2, 6))  # 2.5e5
        value = Fraction(draw(st.one_of(st.integers(-10**7, 10**7), st.integers(-999, 999), round_ones)))
        forms = _integer_forms(int(value))
    else:
        value = Fraction(draw(st.integers(-500, 500).filter(bool)), draw(st.integers(2, 16)))
        if value.denominator == 1:
            value += Fraction(1, 3)
        forms = _fraction_forms(value)
    form, plain = draw(st.sampled_from(forms))
    a, b = draw(st.integers(0, 99)), draw(st.integers(2, 12))
    work = f"Tom buys {a} bags of {b} apples, so {a} * {b} = {a * b} apples.\n\n"
    if plain and draw(st.booleans()):
        return work + f"So the result is {form}", value
    return work + draw(st.sampled_from(_STATEMENTS)).format(form), value


@settings(max_examples=400, deadline=None)
@given(_solutions())
def test_an_answer_in_any_of_its_forms_is_judged_as_its_plain_value(drawn):
    """Extraction and comparison together, as `beamwise eval` grades: every form reads as the plain number."""
    text, value = drawn
    assert same_answer(extract_answer(text), str(value)), extract_answer(text)


@pytest.mark.parametrize(("text", "answer"), [
    ("The answer is ١٢.", "12"), ("The answer is ۱۲", "12"), ("答案：１２", "12"), ("#### १२", "12"),
    ("so we get ١٢ apples", "12"), ("\\boxed{１２}", "12"), ("The answer is １,２００", "1200"),
    ("The answer is 12٫5", "12.5"), ("The answer is 1٬200", "1200"),  # Arabic's decimal and thousands separators
    ("The answer is 1,00,000", "100000"), ("so the cost is 1,50,00,000 rupees", "15000000"),  # Indian grouping
    ("The answer is 12,34,567", "1234567"), ("The answer is 1,000,000", "1000000"), ("The answer is (1,23)", "(1, 23)"),
])
def test_digits_of_every_script_and_indian_grouping_are_read_as_their_number(text, answer):
    """'١٢' was kept as written: a vote of its own beside '12', and judged wrong against an expected 12;
    '1,00,000' was the list '1, 0'."""
    assert extract_answer(text) == answer
    assert same_answer(extract_answer(text), answer)
