"""Live charts of one run: PCIe traffic, device KV against the budget, host KV, step and copy time, stall share.

The numbers live in the window's `SessionModel` (its `ChartSeries`: one point per step, filled
from MemorySnapshot and TransferStats); `ChartsPanel` only hands them to pyqtgraph. Titles say "emulated GPU"
when the run has no CUDA device, so nobody mistakes a modelled figure for a measured one.

Drawing a plot (autorange, axes, grid) costs ~5-10 ms, so live updates redraw only the plots
an event changed, one plot per event-loop pass: a step never holds the window for all four.

The plots themselves (app/gui/chart_canvas.py, pyqtgraph) are built on first need: `build()`, which the window
calls once PyTorch and pyqtgraph have been imported in the background, or whatever asks for them first (a session
opened before). Importing pyqtgraph and making them took ~0.5 s before the window's first paint.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

import app.formatting as fmt
from app.gui import palette as pal
from app.gui.panel import SessionView
from app.session import Change, ChartSeries, SessionModel
from app.session.model import RESET

if TYPE_CHECKING:
    from app.gui.chart_canvas import ChartCanvas

TITLES = {
    "traffic": "PCIe traffic per step",
    "cumulative": "PCIe traffic, cumulative",
    "device": "KV vs budget",
    "copy": "Time per step",
    "stall": "Stall share per step",
}

KEYS = {  # (label, colour, dashed) per curve, shown in the title
    "traffic": [("H2D", pal.H2D, False), ("D2H", pal.D2H, False)],
    "cumulative": [("H2D", pal.H2D, False), ("D2H", pal.D2H, False)],
    "device": [("device", pal.GPU, False), ("peak", pal.GPU, True), ("host", pal.CPU, False),
               ("budget", pal.BUDGET, True), ("verifier KV", pal.VERIFIER, False),  # on the device
               ("verifier host KV", pal.VERIFIER, True)],
    "copy": [("step", pal.STEP_TIME, False), ("copy", pal.MEASURED, False), ("PCIe model", pal.MODELLED, True)],
    "stall": [("waiting for copies", pal.D2H, False)],
}
PANEL_MIN_PX = 120  # the panel's least height on a window with several rows of plots (they scroll a row at a time)
DOCK_PX = 220  # the charts' dock on a window 720 px tall or more: a row of five plots with three-line titles
DOCK_MIN_PX = 150  # and on a shorter window, where the tree (the main content) keeps the rest
WAITING = "The memory and PCIe charts are drawn once PyTorch has loaded…"  # the window builds them then
REDRAW_GAP_MS = 16  # between two plots' redraws: the window paints and takes input in between


class ChartsPanel(SessionView, QWidget):
    """Five live plots in one pyqtgraph canvas; `apply(event)` appends a step's points. On a narrow panel the
    plots take two or more rows (chart_grid) and the canvas scrolls up and down in the panel."""

    plot_redrawn = Signal(str)  # a plot's curves now show the series (live updates, one plot per pass)

    def __init__(self, session: SessionModel | None = None, parent: QWidget | None = None, *,
                 deferred: bool = False) -> None:
        """`deferred`: the plots wait for `build()` (or a read of them); what changes meanwhile is drawn then."""
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._waiting = QLabel(WAITING)
        self._waiting.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._layout.addWidget(self._waiting)
        self._canvas: ChartCanvas | None = None
        self.setMinimumHeight(PANEL_MIN_PX)  # one row of plots asks for its own height (chart_canvas.fit_width)
        self._dirty: list[str] = []  # plots whose curves lag the series, drawn one per pass
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(REDRAW_GAP_MS)
        self._timer.timeout.connect(self._redraw_next)
        self.attach(session)
        self._dirty.extend(TITLES)  # drawn once built
        if not deferred:
            self.build()

    def build(self) -> ChartCanvas:
        """The plots, made now unless they are already (a second call costs nothing)."""
        if self._canvas is None:
            from app.gui.chart_canvas import ChartCanvas

            self._canvas = ChartCanvas(TITLES, self)
            self._waiting.hide()
            self._layout.addWidget(self._canvas.scroll)
            self.flush()
        return self._canvas

    @property
    def built(self) -> bool:
        return self._canvas is not None

    # What the tests and the window read of the plots: built on first need.
    canvas = property(lambda self: self.build().canvas)
    scroll = property(lambda self: self.build().scroll)
    plots = property(lambda self: self.build().plots)
    curves = property(lambda self: self.build().curves)
    budget_line = property(lambda self: self.build().budget_line)
    columns = property(lambda self: self.build().columns)

    def refresh(self, change: Change) -> None:
        """Redraw the plots the change names: live, one per event-loop pass (`flush()` draws now);
        a reset or a replay at once."""
        self._schedule(change.plots)
        if change.event_type == RESET or change.replay:
            self.flush()

    @property
    def pending(self) -> tuple[str, ...]:
        """Plots still to redraw, in order."""
        return tuple(self._dirty)

    def flush(self) -> None:
        """Draw every pending plot now (plots not built yet: when they are)."""
        self._timer.stop()
        while self._dirty and self._canvas is not None:
            self._redraw_plot(self._dirty.pop(0))

    def _schedule(self, plots: Iterable[str]) -> None:
        self._dirty.extend(p for p in plots if p not in self._dirty)
        if self._dirty and self._canvas is not None and not self._timer.isActive():
            self._timer.start()

    def _redraw_next(self) -> None:
        if self._dirty:
            name = self._dirty.pop(0)
            self._redraw_plot(name)
            self.plot_redrawn.emit(name)
        if self._dirty:
            self._timer.start()

    def restyle(self) -> None:
        """Take the palette's current background and text colours (the OS switched between light and dark); plots
        not built yet take them when they are."""
        if self._canvas is None:
            return
        self._canvas.restyle()
        self._schedule(TITLES)
        self.flush()

    def title(self, name: str) -> str:
        """The shown title of plot `name` (one of TITLES) with its key, as plain text."""
        text = re.sub(r"<[^>]+>", " ", self.build().title_html(name))
        return " ".join(html.unescape(text).replace("\xa0", " ").split())

    def _title_html(self, name: str) -> str:
        """Title, the emulated mark, then the curves' key in their colours (no legend box over data)."""
        s = self.session.series
        mark = " · emulated\xa0GPU" if s.emulated else ""  # the two words stay on one line when a title wraps
        mark = " · remote: KV is managed by the server" if s.remote else mark
        figures = _key_figures(s)
        entries = [k for k in KEYS[name] if s.verifier_budget_bytes or not k[0].startswith("verifier")]
        key = "&nbsp; ".join(_key_entry(label, colour, dashed, figures.get(label))  # a key wraps between entries
                             for label, colour, dashed in entries)
        return f"{html.escape(TITLES[name] + mark)}<br>{key}"

    def _redraw_plot(self, name: str) -> None:
        canvas = self.build()
        canvas.set_title(name, self._title_html(name))
        canvas.redraw(name, self.session.series)

    def point_count(self, curve: str) -> int:
        """How many points curve `curve` shows (bars count their bars)."""
        return self.build().point_count(curve)


def dock_height(window_height: int) -> int:
    """The charts' dock height on a window `window_height` px tall: DOCK_PX, less on a window under 720 px (at
    1024x640 the dock kept 220 px and the tree got 190), down to DOCK_MIN_PX."""
    return max(DOCK_MIN_PX, min(DOCK_PX, window_height - 500))


def _key_figures(s: ChartSeries) -> dict[str, str]:
    """The figure beside a curve's label in the key, each saying what it is: the budget line's own value, and the
    verifier's share of the budget, which holds its device KV curve. The share alone there ('verifier device KV
    335.9 kB') read as the curve's value, where the curve draws what the verifier's KV uses, well under it."""
    figures = {} if s.budget_bytes is None else {"budget": fmt.size(s.budget_bytes)}
    if s.verifier_budget_bytes:
        figures["verifier KV"] = f"(share {fmt.size(s.verifier_budget_bytes)})"
    return figures


def _key_entry(label: str, colour: str, dashed: bool, figure: str | None) -> str:
    """One curve's key in the title: its stroke and label in its colour, and a figure where it has one; all on one
    line when the key wraps ('budget 1.0' / 'MB' read as two entries)."""
    text = label if figure is None else f"{label} {figure}"
    words = html.escape(text).replace(" ", "&nbsp;")
    return f'<span style="color:{colour}">{"┅" if dashed else "━"}&nbsp;{words}</span>'
