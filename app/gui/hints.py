"""Text that fits its place on a small screen. Qt cuts a placeholder that is too wide ('Follow-ups come after a
finished ans…') and never wraps it, so a field shows the longest of a few wordings that fits whole; a sentence
above the tree keeps a few lines, so that wrapped in a narrow column it does not push the tree off the window."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics, QTextLayout
from PySide6.QtWidgets import QLineEdit, QTextEdit

MARGIN_PX = 8  # each side of a field's text: its frame and padding, with some to spare


def fit_placeholder(field: QLineEdit | QTextEdit, wordings: tuple[str, ...]) -> str:
    """Show the longest of `wordings` (longest first) that fits `field`'s width, else the last; returns it."""
    room = field.width() - 2 * MARGIN_PX
    if isinstance(field, QTextEdit):
        # its own width less its frame, not its viewport's: before the field is shown the viewport keeps its old
        # size, and the placeholder at 1024 px was picked for a wider one and cut mid-sentence
        bar = field.verticalScrollBar()
        scrolled = bar.width() if field.verticalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAlwaysOn else 0
        room = field.width() - 2 * field.frameWidth() - scrolled - 2 * int(field.document().documentMargin())
    metrics = field.fontMetrics()
    shown = next((w for w in wordings if metrics.horizontalAdvance(w) <= room), wordings[-1])
    field.setPlaceholderText(shown)
    return shown


def first_lines(text: str, font: QFont, width: int, most: int) -> str:
    """`text` as it wraps at `width` px, its first `most` lines, the last ending in '…' when more followed."""
    layout = QTextLayout(text, font)
    layout.beginLayout()
    starts = []
    while (line := layout.createLine()).isValid():
        line.setLineWidth(max(width, 1))
        starts.append(line.textStart())
    layout.endLayout()
    if len(starts) <= most:
        return text
    last = starts[most - 1]
    return text[:last] + QFontMetrics(font).elidedText(text[last:], Qt.TextElideMode.ElideRight, width)
