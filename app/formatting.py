"""Formatting the exports, the CLI and the window share: scores, sizes (decimal units, as the options take
them: 32MB is 32,000,000 B, shown as 32.0 MB everywhere), ratios, durations and cut text."""

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


def size(value: float | None) -> str:
    """Bytes in decimal units (32.0 MB, the units of --kv-budget and the settings); '-' when not recorded."""
    return "-" if value is None else format_bytes(value)


def verifier_place(device: int, host: int, missing: str = "-") -> str:
    """Where the verifier keeps a step's KV: '12.3 kB on GPU' or '... on CPU'; `missing` when it keeps none."""
    if device:
        return f"{size(device)} on GPU"
    return f"{size(host)} on CPU" if host else missing


def axis_size(value: float) -> str:
    """A chart tick: bytes in decimal units without a trailing '.0' (0 B, 500 kB, 1.5 MB)."""
    text = format_bytes(value)
    number, unit = text.split(" ")
    return f"{number.removesuffix('.0')} {unit}"


def ratio(value: float | None) -> str:
    """One format for every ratio column: three significant figures and an x (0.0012x, 0.98x, 3.4x)."""
    return "-" if value is None else f"{value:.3g}x"


def seconds(value: float) -> str:
    """A duration for people: 0.21 s, 4.7 s, 1 min 12 s."""
    if value < 10:
        return f"{value:.2g} s" if value < 1 else f"{value:.1f} s"
    if value < 60:
        return f"{value:.0f} s"
    minutes, rest = divmod(round(value), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def settings(data: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in data.items()) or "-"
