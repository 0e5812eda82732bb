"""A tree box in words: its rich-text tooltip and what a screen reader says for it."""

from __future__ import annotations

import html
import re

import app.formatting as fmt
from app.formatting import size as format_bytes
from app.session import ROOT_ID, Node


def tooltip(node: Node) -> str:
    """Rich-text tooltip; every piece of model text is escaped so '<b>' shows literally."""
    if node.id == ROOT_ID:
        return f"<b>Prompt</b><br>{html.escape(node.text[:400])}"
    score = fmt.score(node.score, "not scored yet")
    share = "no KV reported" if node.device_share is None else f"{node.device_share:.0%} of KV on the GPU"
    verifier = fmt.verifier_place(node.verifier_device_bytes, node.verifier_host_bytes, "")
    return (
        f"<b>#{node.id}</b> · step {node.step} · {node.state} · score {score}<br>"
        f"{html.escape(node.first_line[:200])}<br>{share}; H2D {format_bytes(node.h2d_bytes)}, "
        f"D2H {format_bytes(node.d2h_bytes)}" + (f"<br>verifier KV of this step: {verifier}" if verifier else "")
    )


KEYS_SPOKEN = "Arrow keys select the parent, a child or the box above or below"  # until a box is selected


def spoken(node: Node) -> str:
    """A box in words for a screen reader, which sees the view but not the boxes drawn in it: its tooltip's text."""
    lines = html.unescape(re.sub(r"</?b>", "", tooltip(node))).replace(" · ", ", ").split("<br>")
    return ". ".join(line.rstrip(". ") for line in lines) + "."
