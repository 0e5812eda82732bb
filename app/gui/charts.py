"""Live charts of one run: PCIe traffic, device KV against the budget, host KV, step and copy time, stall share.

The numbers live in the window's `SessionModel` (its `ChartSeries`: one point per step, filled
from MemorySnapshot and TransferStats); `ChartsPanel` only hands them to pyqtgraph. Titles say "emulated GPU"
when the run has no CUDA device, so nobody mistakes a modelled figure for a measured one.

Drawing a plot (autorange, axes, grid) costs ~5-10 ms, so live updates redraw only the plots
an event changed, one plot per event-loop pass: a step never holds the window for all four.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QApplication, QFrame, QGraphicsItem, QScrollArea, QVBoxLayout, QWidget

import pyqtgraph as pg  # isort: skip  (after Qt, so pyqtgraph binds to PySide6)
import app.formatting as fmt
from app.gui import chart_grid as grid
from app.gui import palette as pal
from app.gui.chart_axes import BytesAxis, SecondsAxis, ShareAxis, StepAxis, fit_ranges
from app.gui.panel import SessionView
from app.session import Change, SessionModel
from app.session.model import RESET

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
               ("budget", pal.BUDGET, True), ("verifier device KV", pal.VERIFIER, False),
               ("verifier host KV", pal.VERIFIER, True)],
    "copy": [("step", pal.STEP_TIME, False), ("copy", pal.MEASURED, False), ("PCIe model", pal.MODELLED, True)],
    "stall": [("waiting for copies", pal.D2H, False)],
}
LEFT_AXIS_PX = 58  # room for tick labels such as "500 kB" or "12.5 ms"
PLOT_MIN_PX = 150  # the panel at least this tall (and its margins): a row of plots shows whole
PLOT_PREFERRED_PX = 200  # the same for every plot, whatever its title says
REDRAW_GAP_MS = 16  # between two plots' redraws: the window paints and takes input in between


class ChartsPanel(SessionView, QWidget):
    """Five live plots in one pyqtgraph canvas; `apply(event)` appends a step's points. On a narrow panel the
    plots take two or more rows (chart_grid) and the canvas scrolls up and down in the panel."""

    plot_redrawn = Signal(str)  # a plot's curves now show the series (live updates, one plot per pass)

    def __init__(self, session: SessionModel | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        pg.setConfigOptions(antialias=True)
        self.canvas = pg.GraphicsLayoutWidget()
        self.canvas.setAccessibleName("Memory and PCIe charts")
        self.canvas.setBackground(pal.BACKGROUND)
        self.scroll = QScrollArea()
        self.scroll.setWidget(self.canvas)
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # Tab reaches the canvas, not its frame
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.scroll)
        self.plots = {name: self._make_plot(name) for name in TITLES}
        self.columns = len(TITLES)
        grid.arrange(self.canvas.ci, list(self.plots.values()), self.columns)
        self.setMinimumHeight(PLOT_MIN_PX + 40)
        self.canvas.installEventFilter(self)
        self.canvas.viewport().installEventFilter(self)
        self.curves = self._make_curves()
        self.budget_line = pg.InfiniteLine(angle=0, movable=False,  # its size is in the title's key, off the lines
                                           pen=pg.mkPen(pal.BUDGET, width=1.5, style=Qt.PenStyle.DashLine))
        self.plots["device"].addItem(self.budget_line)
        self._dirty: list[str] = []  # plots whose curves lag the series, drawn one per pass
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(REDRAW_GAP_MS)
        self._timer.timeout.connect(self._redraw_next)
        self.attach(session)
        self._schedule(TITLES)
        self.flush()

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
        """Draw every pending plot now."""
        self._timer.stop()
        while self._dirty:
            self._redraw_plot(self._dirty.pop(0))

    def _schedule(self, plots: Iterable[str]) -> None:
        self._dirty.extend(p for p in plots if p not in self._dirty)
        if self._dirty and not self._timer.isActive():
            self._timer.start()

    def _redraw_next(self) -> None:
        if self._dirty:
            name = self._dirty.pop(0)
            self._redraw_plot(name)
            self.plot_redrawn.emit(name)
        if self._dirty:
            self._timer.start()

    def restyle(self) -> None:
        """Take the palette's current background and text colours (the OS switched between light and dark)."""
        self.canvas.setBackground(pal.BACKGROUND)
        for name, plot in self.plots.items():
            plot.titleLabel.text = ""  # so _set_title writes it again in the new colour
            for side in ("left", "bottom"):
                plot.getAxis(side).setTextPen(pg.mkPen(pal.MUTED_TEXT))
            plot.setLabel("bottom", "step", color=pal.MUTED_TEXT)
            self._schedule([name])
        self.flush()

    def title(self, name: str) -> str:
        """The shown title of plot `name` (one of TITLES) with its key, as plain text."""
        text = re.sub(r"<[^>]+>", " ", self.plots[name].titleLabel.text)
        return " ".join(html.unescape(text).replace("\xa0", " ").split())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.canvas and event.type() == QEvent.Type.Resize:  # the panel, or its scroll bar came
            self._fit_width()
        elif watched is self.canvas.viewport() and event.type() == QEvent.Type.Wheel:
            # the plots neither zoom nor pan, yet pyqtgraph's scene takes the wheel: it scrolls the rows instead
            QApplication.sendEvent(self.scroll.verticalScrollBar(), event)
            return True
        return False

    def _fit_width(self) -> None:
        """As many plots a row as the width keeps legible, titles wrapped inside their plots, and the canvas as
        tall as its rows need (the scroll area scrolls when the panel is shorter)."""
        width = self.canvas.width()
        columns = grid.columns_for(width, len(self.plots))
        if columns != self.columns:
            self.columns = columns
            grid.arrange(self.canvas.ci, list(self.plots.values()), columns)
        plot_width = grid.column_width(width, columns)
        for plot in self.plots.values():
            grid.wrap_title(plot, plot_width)
        needed = self.canvas.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).height()
        self.canvas.setMinimumHeight(int(needed) + 1)

    def _make_plot(self, name: str) -> pg.PlotItem:
        left = {"copy": SecondsAxis, "stall": ShareAxis}.get(name, BytesAxis)("left")
        plot = pg.PlotItem(axisItems={"bottom": StepAxis("bottom"), "left": left})
        plot.showGrid(x=True, y=True, alpha=0.15)
        plot.setMenuEnabled(False)
        plot.setMouseEnabled(x=False, y=False)
        for side in ("left", "bottom"):
            axis = plot.getAxis(side)
            axis.setPen(pg.mkPen("#9aa3ad"))
            axis.setTextPen(pg.mkPen(pal.MUTED_TEXT))
            # Ticks, labels and grid are replayed from a picture on every paint of the plot (~2 ms
            # an axis); cached, an axis is drawn again only when its range changes.
            axis.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        plot.getAxis("left").setWidth(LEFT_AXIS_PX)  # tick labels of a new width must not lay the canvas out
        plot.setPreferredWidth(PLOT_PREFERRED_PX)  # nor a longer title: the two columns stay equal
        plot.setLabel("bottom", "step", color=pal.MUTED_TEXT)
        return plot

    def _make_curves(self) -> dict[str, pg.GraphicsObject]:
        p = self.plots
        bars = {
            "step_h2d": pg.BarGraphItem(x=[], height=[], width=0.38, brush=pal.H2D, pen=None, name="H2D"),
            "step_d2h": pg.BarGraphItem(x=[], height=[], width=0.38, brush=pal.D2H, pen=None, name="D2H"),
        }
        for bar in bars.values():
            p["traffic"].addItem(bar)
        bars["stall"] = pg.BarGraphItem(x=[], height=[], width=0.6, brush=pal.color(pal.D2H, 170), pen=None)
        p["stall"].addItem(bars["stall"])
        return {
            **bars,
            "total_h2d": _line(p["cumulative"], pal.H2D, "H2D"),
            "total_d2h": _line(p["cumulative"], pal.D2H, "D2H"),
            "device": _line(p["device"], pal.GPU, "device KV"),
            "peak": _line(p["device"], pal.GPU, "peak in step", dashed=True),
            "host": _line(p["device"], pal.CPU, "host KV"),
            "verifier_device": _line(p["device"], pal.VERIFIER, "verifier device KV"),
            "verifier_host": _line(p["device"], pal.VERIFIER, "verifier host KV", dashed=True),
            "step": _line(p["copy"], pal.STEP_TIME, "step"),
            "copy": _line(p["copy"], pal.MEASURED, "measured copy"),
            "modelled": _line(p["copy"], pal.MODELLED, "modelled PCIe", dashed=True),
        }

    def _set_title(self, name: str) -> None:
        """Title, the emulated mark, then the curves' key in their colours (no legend box over data)."""
        s = self.session.series
        mark = " · emulated\xa0GPU" if s.emulated else ""  # the two words stay on one line when a title wraps
        mark = " · remote: KV is managed by the server" if s.remote else mark
        sizes = {"budget": s.budget_bytes, "verifier device KV": s.verifier_budget_bytes or None}  # the share
        entries = [k for k in KEYS[name] if s.verifier_budget_bytes or not k[0].startswith("verifier")]
        key = "&nbsp; ".join(_key_entry(label, colour, dashed, sizes.get(label))  # a key wraps between entries
                             for label, colour, dashed in entries)
        title = f"{html.escape(TITLES[name] + mark)}<br>{key}"
        if self.plots[name].titleLabel.text != title:  # setting a title lays the canvas out again
            self.plots[name].setTitle(title, color=pal.SELECTION, size="9pt")
            self._fit_width()  # the new title wraps to its plot's width

    def _redraw_plot(self, name: str) -> None:
        self._set_title(name)
        s, c = self.session.series, self.curves
        steps = s.transfer_steps
        if name in ("traffic", "cumulative"):  # the question's own traffic, where it moved any, is x = 0: "prompt"
            x, h2d, d2h = s.traffic(cumulative=name == "cumulative")
            if name == "traffic":
                c["step_h2d"].setOpts(x=[v - 0.2 for v in x], height=h2d)
                c["step_d2h"].setOpts(x=[v + 0.2 for v in x], height=d2h)
            else:
                c["total_h2d"].setData(x, h2d)
                c["total_d2h"].setData(x, d2h)
            fit_ranges(self.plots[name], x, [*h2d, *d2h], first=min(x, default=1))
        elif name == "copy":
            c["step"].setData(steps, s.step_seconds)
            c["copy"].setData(steps, s.copy_seconds)
            c["modelled"].setData(steps, s.modelled_seconds)
            fit_ranges(self.plots[name], steps, [*s.step_seconds, *s.copy_seconds, *s.modelled_seconds])
        elif name == "stall":
            c["stall"].setOpts(x=steps, height=s.stall_share)
            fit_ranges(self.plots[name], steps, [1.0])  # always 0 … 100 %
        else:
            c["device"].setData(s.memory_steps, s.device_bytes)
            c["peak"].setData(s.memory_steps, s.peak_device_bytes)
            c["host"].setData(s.memory_steps, s.host_bytes)
            steps = s.memory_steps if s.verifier_budget_bytes else []  # a verifier that keeps no KV draws no curve
            c["verifier_device"].setData(steps, s.verifier_device_bytes[: len(steps)])
            c["verifier_host"].setData(steps, s.verifier_host_bytes[: len(steps)])
            self._redraw_budget()
            budget = [] if s.budget_bytes is None else [s.budget_bytes]
            shown = [*s.device_bytes, *s.peak_device_bytes, *s.host_bytes, *budget, *s.verifier_device_bytes,
                     *s.verifier_host_bytes]
            fit_ranges(self.plots[name], s.memory_steps, shown)

    def _redraw_budget(self) -> None:
        budget = self.session.series.budget_bytes
        self.budget_line.setVisible(budget is not None)
        if budget is not None:
            self.budget_line.setValue(budget)

    def point_count(self, curve: str) -> int:
        """How many points curve `curve` shows (bars count their bars)."""
        item = self.curves[curve]
        if isinstance(item, pg.BarGraphItem):
            return len(item.opts["height"])
        x, _ = item.getData()
        return 0 if x is None else len(x)


def _key_entry(label: str, colour: str, dashed: bool, size: int | None) -> str:
    """One curve's key in the title: its stroke and label in its colour, and a size where it has one; all on one
    line when the key wraps ('budget 1.0' / 'MB' read as two entries)."""
    text = label if size is None else f"{label} {fmt.size(size)}"
    words = html.escape(text).replace(" ", "&nbsp;")
    return f'<span style="color:{colour}">{"┅" if dashed else "━"}&nbsp;{words}</span>'


def _line(plot: pg.PlotItem, colour: str, name: str, dashed: bool = False) -> pg.PlotDataItem:
    style = Qt.PenStyle.DashLine if dashed else Qt.PenStyle.SolidLine
    return plot.plot([], [], name=name, pen=pg.mkPen(colour, width=2, style=style),
                     symbol=None if dashed else "o", symbolSize=5, symbolBrush=colour, symbolPen=None)

