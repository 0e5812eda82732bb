"""Colours, fonts and legend entries shared by the tree, the charts and the panels.

A calm dark-on-light palette: states differ by border colour and fill tint, memory place by
two fixed hues (GPU blue, CPU amber) that the charts reuse, so one legend explains both.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import QLabel, QWidget


@dataclass(frozen=True)
class StateStyle:
    """How a node state is drawn: border, fill, text colour, border width, and its legend label."""

    border: str
    fill: str
    text: str
    width: float
    label: str


STATE_STYLES: dict[str, StateStyle] = {
    "running": StateStyle("#5b7fb8", "#f2f6fc", "#1f2933", 1.6, "running"),
    "kept": StateStyle("#2f8a57", "#eef7f1", "#1f2933", 2.0, "kept"),
    "pruned": StateStyle("#b9bec6", "#f5f6f7", "#8a929c", 1.0, "pruned"),
    "finished": StateStyle("#7a5bb5", "#f4f0fa", "#1f2933", 2.0, "complete (EOS)"),
    "final": StateStyle("#c77c0e", "#fff5e1", "#1f2933", 3.2, "chosen path"),
}
ROOT_STYLE = StateStyle("#3d4a5c", "#e9edf2", "#1f2933", 1.6, "prompt")

BACKGROUND = "#fbfbfa"
EDGE = "#c3c8cf"
EDGE_KEPT = "#7fae93"
EDGE_FINAL = "#c77c0e"
SELECTION = "#1f2933"
MUTED_TEXT = "#5f6b7a"
GPU = "#3b7dd8"
CPU = "#e0a43a"
NO_KV = "#e3e6ea"
H2D = "#3b7dd8"
D2H = "#c0504d"
BUDGET = "#c0504d"
MODELLED = "#7a5bb5"
MEASURED = "#2f8a57"
VERIFIER = "#1f9e89"  # the verifier's KV in the charts (solid: device, dashed: host)


def color(hex_code: str, alpha: int = 255) -> QColor:
    """A QColor from '#rrggbb' with an optional alpha (0-255)."""
    c = QColor(hex_code)
    c.setAlpha(alpha)
    return c


def ui_font(point_size: float = 9.0, bold: bool = False) -> QFont:
    """The application font at a given size: one family everywhere, sizes differ only."""
    font = QFont()
    font.setPointSizeF(point_size)
    font.setBold(bold)
    return font


class TreeLegend(QLabel):
    """Explains state colours and the GPU/CPU fill; says 'emulated GPU' when the run is emulated."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setStyleSheet(
            "QLabel { background: rgba(255,255,255,235); border: 1px solid #d5d9de; border-radius: 6px;"
            " padding: 4px 8px; color: #1f2933; }"
        )
        self.set_emulated(False)

    def set_emulated(self, emulated: bool, *, remote: bool = False) -> None:
        self.emulated, self.remote = emulated, remote
        states = "  ".join(
            f'<span style="color:{s.border}">■</span> {html.escape(s.label)}' for s in STATE_STYLES.values()
        )
        gpu = "emulated GPU" if emulated else "GPU"
        kv = (
            f'KV: <span style="color:{GPU}">■</span> on {gpu}  <span style="color:{CPU}">■</span> on CPU'
            "  ·  box: score, group g#, id, first line, PCIe bytes for its step"
        )
        if remote:  # nothing to place: the server's prefix cache holds the KV
            kv = "KV: remote: KV is managed by the server  ·  box: score, id, first line"
        self.setText(f"{states}<br>{kv}")
        self.adjustSize()

    def plain_text(self) -> str:
        """The legend's words without markup (for tests and accessibility)."""
        return html.unescape(self.text().replace("<br>", "\n")).replace("■", "").strip()
