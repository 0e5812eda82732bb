"""Placeholders that fit their field: Qt cuts a placeholder that is too wide ('Follow-ups come after a finished
ans…') and never wraps it, so a field on a narrow dock shows the longest of a few wordings that fits whole."""

from __future__ import annotations

from PySide6.QtWidgets import QLineEdit, QTextEdit

MARGIN_PX = 8  # each side of a field's text: its frame and padding, with some to spare


def fit_placeholder(field: QLineEdit | QTextEdit, wordings: tuple[str, ...]) -> str:
    """Show the longest of `wordings` (longest first) that fits `field`'s width, else the last; returns it."""
    room = field.width() - 2 * MARGIN_PX
    if isinstance(field, QTextEdit):
        room = field.viewport().width() - 2 * int(field.document().documentMargin())
    metrics = field.fontMetrics()
    shown = next((w for w in wordings if metrics.horizontalAdvance(w) <= room), wordings[-1])
    field.setPlaceholderText(shown)
    return shown
