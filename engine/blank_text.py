"""Whether a text shows nothing, so a question, an eval problem or a session title of invisible characters alone is
refused as empty (a run of "\\u200b" asked the model nothing it could see)."""

from __future__ import annotations

import unicodedata

# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt, as of Unicode 14): characters
# a font draws as nothing when it has no glyph for them: the soft hyphen, zero-width spaces and joiners, direction
# marks and isolates, variation selectors (U+FE0F), the combining grapheme joiner, the Hangul fillers, tags.
DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F),
    (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
BLANK_BRAILLE = "\u2800"  # a braille cell with no dots: drawn as an empty space, though Unicode calls it a symbol


def _ignorable(ch: str) -> bool:
    code = ord(ch)
    return any(first <= code <= last for first, last in DEFAULT_IGNORABLE)


def is_blank_char(ch: str) -> bool:
    """Whether `ch` alone draws nothing: whitespace (NBSP too), a control character (Unicode's Cc: NUL, escape, ...),
    a default-ignorable code point or the blank braille cell. Format characters that are drawn (the prepended
    concatenation marks such as U+0600 ARABIC NUMBER SIGN, Cf but visible) are not blank."""
    return ch.isspace() or unicodedata.category(ch) == "Cc" or ch == BLANK_BRAILLE or _ignorable(ch)


def is_blank(text: str) -> bool:
    """Whether `text` shows nothing (every character `is_blank_char`), "" included. Within text the invisible
    characters stay as written (a ZWJ joins the emoji of a family, U+FE0F asks for an emoji's colour form)."""
    return all(is_blank_char(ch) for ch in text)
