"""Formatting the exports, the sessions CLI and the window share: scores, sizes, cut text."""

from __future__ import annotations

from html import escape
from typing import Any

from engine.errors import format_bytes


def md_text(text: str) -> str:
    """Text for Markdown with its HTML inert: many viewers render raw `<script>` or `<img onerror>` as HTML."""
    return escape(text, quote=False)


def md_line(text: str) -> str:
    """One Markdown table/list line: whitespace collapsed, pipes and HTML escaped."""
    return md_text(" ".join(text.split())).replace("|", "\\|")


def brief(text: str | None, limit: int = 80) -> str:
    """Whitespace collapsed, cut at `limit` characters with an ellipsis."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def score(value: float | None, missing: str = "-") -> str:
    """A verifier score to three places; `missing` when there is none yet."""
    return missing if value is None else f"{value:.3f}"


def size(value: int | None) -> str:
    """Bytes in binary units; '-' when not recorded."""
    return "-" if value is None else format_bytes(value)


def settings(data: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in data.items()) or "-"
