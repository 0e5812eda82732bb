"""Colours, fonts and legend entries shared by the tree, the charts and the panels.

A calm palette in a light and a dark variant (the window follows the OS): states differ by border
colour and fill tint, memory place by two fixed hues (GPU blue, CPU amber) that the charts reuse,
so one legend explains both. `use_dark` switches the variant before views build their pens.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QLabel, QWidget


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
    "finished": StateStyle("#7a5bb5", "#f4f0fa", "#1f2933", 2.0, "complete (EOS or full context)"),
    "final": StateStyle("#c77c0e", "#fff5e1", "#1f2933", 3.2, "chosen path"),
}
ROOT_STYLE = StateStyle("#3d4a5c", "#e9edf2", "#1f2933", 1.6, "prompt")

BACKGROUND = "#fbfbfa"
EDGE = "#c3c8cf"
EDGE_KEPT = "#7fae93"
EDGE_FINAL = "#c77c0e"
SELECTION = "#1f2933"
HOVER = "#3b7dd8"  # the hovered node's path
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
STEP_TIME = "#7a8794"  # reads on the light and the dark background alike
LEGEND_STYLE = "background: rgba(255,255,255,235); border: 1px solid #d5d9de; color: #1f2933;"

LIGHT = {name: value for name, value in globals().items() if name.isupper()}
LIGHT["STATE_STYLES"] = dict(STATE_STYLES)
DARK = {
    **LIGHT,
    "STATE_STYLES": {
        "running": StateStyle("#6f95d0", "#243041", "#e6e9ee", 1.6, "running"),
        "kept": StateStyle("#4fb27a", "#1f3328", "#e6e9ee", 2.0, "kept"),
        "pruned": StateStyle("#5c636d", "#25282d", "#8a929c", 1.0, "pruned"),
        "finished": StateStyle("#9c7fd6", "#2d2740", "#e6e9ee", 2.0, "complete (EOS or full context)"),
        "final": StateStyle("#e39a2d", "#3d2f17", "#f5f5f5", 3.2, "chosen path"),
    },
    "ROOT_STYLE": StateStyle("#8fa0b5", "#2a313a", "#e6e9ee", 1.6, "prompt"),
    "BACKGROUND": "#1e2227", "EDGE": "#4d545d", "EDGE_KEPT": "#5f9c78", "EDGE_FINAL": "#e39a2d",
    "SELECTION": "#e6e9ee", "MUTED_TEXT": "#9aa5b1", "NO_KV": "#3a3f46", "HOVER": "#5b9bf0",
    "LEGEND_STYLE": "background: rgba(30,34,39,235); border: 1px solid #3a3f46; color: #e6e9ee;",
}


def use_dark(dark: bool) -> None:
    """Switch every colour above to the dark (or light) variant; views built afterwards, or restyled, use it."""
    chosen = DARK if dark else LIGHT
    for name, value in chosen.items():
        if name == "STATE_STYLES":
            STATE_STYLES.clear()
            STATE_STYLES.update(value)
        else:
            globals()[name] = value


def is_dark() -> bool:
    return BACKGROUND == DARK["BACKGROUND"]


def system_prefers_dark() -> bool:
    """The OS's colour scheme (Qt 6.5+); False when the platform does not say (offscreen, older desktops)."""
    return QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark


def apply_theme(app: QApplication, dark: bool) -> None:
    """Use the variant; where the platform's own widget palette does not match it, Fusion with a matching one."""
    use_dark(dark)
    platform_dark = app.palette().color(QPalette.ColorRole.Window).lightness() < 128
    if platform_dark == dark:
        return
    app.setStyle("Fusion")
    if not dark:
        app.setPalette(app.style().standardPalette())
        return
    colours = {QPalette.ColorRole.Window: "#2b2f35", QPalette.ColorRole.WindowText: "#e6e9ee",
               QPalette.ColorRole.Base: "#1e2227", QPalette.ColorRole.AlternateBase: "#2b2f35",
               QPalette.ColorRole.Text: "#e6e9ee", QPalette.ColorRole.Button: "#2f343b",
               QPalette.ColorRole.ButtonText: "#e6e9ee", QPalette.ColorRole.Highlight: "#3b7dd8",
               QPalette.ColorRole.HighlightedText: "#ffffff", QPalette.ColorRole.ToolTipBase: "#2b2f35",
               QPalette.ColorRole.ToolTipText: "#e6e9ee", QPalette.ColorRole.PlaceholderText: "#8a929c",
               QPalette.ColorRole.Link: "#6fa8ff"}
    palette = QPalette()
    for role, value in colours.items():
        palette.setColor(role, QColor(value))
    palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor("#6b727c"))
    palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor("#6b727c"))
    palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText, QColor("#6b727c"))
    app.setPalette(palette)


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
    """Explains state colours and the GPU/CPU fill; says 'emulated GPU' when the run is emulated. `compact`: one
    line of the state colours, the whole legend in its tooltip (a short tree view, where it covered the boxes)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.compact = False
        self.restyle()
        self.set_emulated(False)

    def restyle(self) -> None:
        self.setStyleSheet(f"QLabel {{ {LEGEND_STYLE} border-radius: 6px; padding: 4px 8px; }}")

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
        self._full = f"{states}<br>{kv}"
        self._show()

    def _show(self) -> None:
        colours = "".join(f'<span style="color:{s.border}">■</span>' for s in STATE_STYLES.values())
        self.setText(f"{colours} legend: point here" if self.compact else self._full)
        self.setToolTip(self._full if self.compact else "")
        self.setAccessibleDescription(self.plain_text())
        self.adjustSize()

    def fit_width(self, room: int, most_height: int | None = None) -> None:
        """One line per row when `room` pixels allow it; wrapped to `room` when not; compact when even so it
        would be taller than `most_height`."""
        for compact in (False, True):
            if compact != self.compact:
                self.compact = compact
                self._show()
            self.setWordWrap(False)
            self.setMinimumSize(0, 0)
            self.setMaximumSize(16_777_215, 16_777_215)
            self.adjustSize()
            if self.width() > room:
                self.setWordWrap(True)
                self.setFixedWidth(room)
                self.setFixedHeight(self.heightForWidth(room))
            if most_height is None or self.height() <= most_height:
                return

    def plain_text(self) -> str:
        """The legend's words without markup (for tests and accessibility)."""
        return html.unescape(re.sub(r"<[^>]+>", "", self._full.replace("<br>", "\n"))).replace("■", "").strip()
