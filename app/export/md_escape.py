"""Model text made literal for the Markdown export: a viewer shows what the model wrote, and builds nothing from it.

A model's text is data. Left as it was, a step starting with `#` became a heading, lines with `|`
a table, three backticks a code block that ran to the end of the quote, `![x](http://...)` an image
the viewer fetched from the web, `<script>` live HTML, and `2*3*4` lost its stars to emphasis.
Here every character that Markdown reads as structure is backslash-escaped (HTML's as entities),
control characters become U+FFFD (the export printed to a terminal must not drive it), and math
written between dollars is left as written: a viewer that renders math reads it raw, and one that
does not shows the same characters (but for emphasis stars: `$2*3*4$` stays math, as a math viewer reads it).
Dollars around what LaTeX never writes, a link's `](` or a backtick, are no math: it is escaped as text, so
`$![x](http://...)$` fetches nothing.
"""

from __future__ import annotations

import re
import unicodedata
from html import escape

MATH = re.compile(r"\$\$.+?\$\$|\$(?=[^\s$])[^$\n]*(?<=[^\s$\\])\$", re.DOTALL)  # $$..$$ and pandoc's $x$
INLINE = re.compile(r"[\\`*\[\]~|]|(?<![^\W_])_|_(?![^\W_])")  # `_` inside a word emphasises nothing
LINE_START = re.compile(r"^( {0,3})([#+=-]|\d{1,9}(?=[.)]))", re.MULTILINE)  # headings, lists, setext lines
NOT_MATH = re.compile(r"\]\(|`")  # a link's or image's target, a code span: structure, never LaTeX
INDENT = re.compile(r"^(?= {4}| {0,3}\t)", re.MULTILINE)  # would start a code block, where escapes show


def literal_text(text: str) -> str:
    """`text` as Markdown that renders to the same characters (its line breaks kept)."""
    text = without_controls(text)
    out, last = [], 0
    for math in MATH.finditer(text):
        if NOT_MATH.search(math.group()):
            continue  # escaped with the text around it
        out += [_escaped(text[last:math.start()]), escape(math.group(), quote=False)]
        last = math.end()
    out.append(_escaped(text[last:]))
    return "".join(out)


def literal_line(text: str) -> str:
    """`text` on one line (whitespace collapsed) for a heading, a list item or a table cell."""
    return literal_text(" ".join(text.split()))


def without_controls(text: str) -> str:
    """Line breaks as `\\n` and every other control character but tab as U+FFFD."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "".join(ch if ch in "\n\t" or unicodedata.category(ch) != "Cc" else "\ufffd" for ch in text)


def _escaped(text: str) -> str:
    """Text outside math: each structure character escaped; a line that starts a block starts it no more (a
    segment after a math span starts mid-line, where the escape is harmless)."""
    text = INLINE.sub(lambda m: "\\" + m.group(), escape(text, quote=False))
    return INDENT.sub("&#32;", LINE_START.sub(_mark_line_start, text))


def _mark_line_start(match: re.Match[str]) -> str:
    indent, marker = match.groups()
    return f"{indent}{marker}\\" if marker[0].isdigit() else f"{indent}\\{marker}"
