"""The pyqtgraph side of the charts panel: the canvas in its scroll area, one plot per chart, their curves and the
budget line. Built on first need (app/gui/charts.py): importing pyqtgraph and making the plots took ~0.5 s of the
window's start, before its first paint."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QPen, QWheelEvent
from PySide6.QtWidgets import QApplication, QFrame, QGraphicsItem, QScrollArea

import pyqtgraph as pg  # isort: skip  (after Qt, so pyqtgraph binds to PySide6)
import app.formatting as fmt
from app.gui import chart_grid as grid
from app.gui import palette as pal
from app.gui.chart_axes import BytesAxis, SecondsAxis, ShareAxis, StepAxis, fit_ranges
from app.session.series import ChartSeries

QWIDGETSIZE_MAX = 16_777_215  # Qt's "no maximum"
LEFT_AXIS_PX = 58  # room for tick labels such as "500 kB" or "12.5 ms"
PLOT_PREFERRED_PX = 200  # the same for every plot, whatever its title says
AXIS_COLOUR = "#9aa3ad"
BAR_MIN_PX = 3  # a bar at least this wide: at 250 steps a 0.38-step bar was under a pixel and the plot looked empty
BAR_WIDTHS = {"step_h2d": 0.38, "step_d2h": 0.38, "stall": 0.6}  # in steps, while a step is wide enough
BAR_PLOTS = {"traffic": ("step_h2d", "step_d2h"), "stall": ("stall",)}


class ChartCanvas(QObject):
    """The plots `names` side by side in `scroll` (chart_grid decides the rows); `redraw(name, series)` shows a
    plot's curves, `set_title` its title."""

    def __init__(self, names: Iterable[str], parent: QObject | None = None) -> None:
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
        self.plots = {name: _make_plot(name) for name in names}
        self.columns = len(self.plots)
        grid.arrange(self.canvas.ci, list(self.plots.values()), self.columns)
        self.canvas.installEventFilter(self)
        self.canvas.viewport().installEventFilter(self)
        self.scroll.viewport().installEventFilter(self)  # a shorter panel: rows as tall as the view again
        self.row_pitch = 0  # px from one row's top to the next when the rows scroll (0: they all show)
        self._line_looks: dict[pg.PlotDataItem, tuple[str, bool]] = {}  # colour, dashed: _scale_pens sets the pens
        self.curves = self._make_curves()
        self.budget_line = pg.InfiniteLine(angle=0, movable=False)  # its size is in the title's key, off the lines
        self.plots["device"].addItem(self.budget_line)
        for name in BAR_PLOTS:
            self.plots[name].vb.sigResized.connect(lambda _vb, name=name: self._fit_bars(name))
        self.pen_ratio = 0.0  # the device pixel ratio the pens are drawn for
        self._scale_pens()

    def restyle(self) -> None:
        """Take the palette's current background and text colours; the titles are set again by the caller."""
        self.canvas.setBackground(pal.BACKGROUND)
        for plot in self.plots.values():
            plot.titleLabel.text = ""  # so set_title writes it again in the new colour
            for side in ("left", "bottom"):
                plot.getAxis(side).setTextPen(pg.mkPen(pal.MUTED_TEXT))
            plot.setLabel("bottom", "step", color=pal.MUTED_TEXT)

    def title_html(self, name: str) -> str:
        return self.plots[name].titleLabel.text

    def set_title(self, name: str, title: str) -> None:
        if self.plots[name].titleLabel.text != title:  # setting a title lays the canvas out again
            self.plots[name].setTitle(title, color=pal.SELECTION, size="9pt")
            self.fit_width()  # the new title wraps to its plot's width

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize and watched in (self.canvas, self.scroll.viewport()):
            self.fit_width()  # the panel, or its scroll bar came
        elif watched is self.canvas and event.type() == QEvent.Type.DevicePixelRatioChange:  # another screen's
            self._scale_pens()
        elif watched is self.canvas.viewport() and event.type() == QEvent.Type.Wheel:
            # the plots neither zoom nor pan, yet pyqtgraph's scene takes the wheel: it scrolls the rows instead
            self._wheel(event)
            return True
        return False

    def fit_width(self) -> None:
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
        self._fit_rows()

    def _fit_rows(self) -> None:
        """One row of plots: it shrinks to the panel where it can, so no axis is cut (a verifier's key took two
        more lines and the step axes went under the panel's edge). Several rows: each as tall as the view (or its
        least), so a row shows whole, not the next one's title cut in half under it, and the wheel steps by rows."""
        layout = self.canvas.ci.layout
        rows = -(-len(self.plots) // self.columns)
        layout.setContentsMargins(*(grid.MARGIN_PX,) * 4)
        for row in range(layout.rowCount()):  # pyqtgraph's own row heights, as the titles now need
            layout.setRowMinimumHeight(row, 0)
            layout.setRowMaximumHeight(row, QWIDGETSIZE_MAX)
        needed = int(self.canvas.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).height()) + 1
        view = self.scroll.viewport().height()
        if rows == 1 and needed > view:
            grid.fit_one_row(self.canvas.ci, list(self.plots.values()), needed - view)
            needed = int(self.canvas.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).height()) + 1
        self.row_pitch = 0
        if rows > 1 and needed > view:
            tallest = max(p.effectiveSizeHint(Qt.SizeHint.MinimumSize).height() for p in self.plots.values())
            self.row_pitch = max(view, int(tallest) + grid.SPACING_PX)
            for row in range(rows):
                layout.setRowFixedHeight(row, self.row_pitch - grid.SPACING_PX)
            needed = rows * self.row_pitch + 2 * grid.MARGIN_PX - grid.SPACING_PX
        self.canvas.setMinimumHeight(needed)

    def _wheel(self, event: QWheelEvent) -> None:
        """A notch of the wheel scrolls to the next row's top (rows that fit the view), else as a scroll bar does."""
        bar = self.scroll.verticalScrollBar()
        if not self.row_pitch:
            QApplication.sendEvent(bar, event)
            return
        notches = -event.angleDelta().y() / 120
        step = round(notches) if abs(notches) >= 1 else (1 if notches > 0 else -1 if notches < 0 else 0)
        row = round(bar.value() / self.row_pitch) + step
        bar.setValue(row * self.row_pitch)

    def _fit_bars(self, name: str) -> None:
        """Bars at least BAR_MIN_PX wide, however many steps share the plot's width."""
        pixel = self.plots[name].vb.viewPixelSize()[0]  # steps per pixel
        for key in BAR_PLOTS[name]:
            bar = self.curves[key]
            width = max(BAR_WIDTHS[key], BAR_MIN_PX * pixel)
            if bar.opts["width"] != width:
                bar.setOpts(width=width)

    def _scale_pens(self) -> None:
        """Give every line its width in device pixels. pyqtgraph's pens are cosmetic: Qt draws them so many device
        pixels wide, not logical ones, and at 150 % or 200 % scaling (a 4K screen) the curves, the budget line,
        the axes and the grid were half as thick as meant, hairlines."""
        ratio = self.canvas.devicePixelRatioF()
        if ratio == self.pen_ratio:
            return
        self.pen_ratio = ratio
        for plot in self.plots.values():
            for side in ("left", "bottom"):
                plot.getAxis(side).setPen(pg.mkPen(AXIS_COLOUR, width=ratio))  # the grid's lines too
        for curve, (colour, dashed) in self._line_looks.items():
            curve.setPen(_line_pen(colour, dashed, ratio))
        self.budget_line.setPen(pg.mkPen(pal.BUDGET, width=1.5 * ratio, style=Qt.PenStyle.DashLine))

    def _line(self, plot: pg.PlotItem, colour: str, name: str, dashed: bool = False) -> pg.PlotDataItem:
        """A curve with round points (pyqtgraph sizes them for the screen itself); _scale_pens gives its pen."""
        curve = plot.plot([], [], name=name, pen=None, symbol=None if dashed else "o", symbolSize=5,
                          symbolBrush=colour, symbolPen=None)
        self._line_looks[curve] = (colour, dashed)
        return curve

    def _make_curves(self) -> dict[str, pg.GraphicsObject]:
        p = self.plots
        bars = {
            "step_h2d": pg.BarGraphItem(x=[], height=[], width=BAR_WIDTHS["step_h2d"], brush=pal.H2D, pen=None,
                                        name="H2D"),
            "step_d2h": pg.BarGraphItem(x=[], height=[], width=BAR_WIDTHS["step_d2h"], brush=pal.D2H, pen=None,
                                        name="D2H"),
        }
        for bar in bars.values():
            p["traffic"].addItem(bar)
        bars["stall"] = pg.BarGraphItem(x=[], height=[], width=BAR_WIDTHS["stall"], brush=pal.color(pal.D2H, 170),
                                        pen=None)
        p["stall"].addItem(bars["stall"])
        return {
            **bars,
            "total_h2d": self._line(p["cumulative"], pal.H2D, "H2D"),
            "total_d2h": self._line(p["cumulative"], pal.D2H, "D2H"),
            "device": self._line(p["device"], pal.GPU, "device KV"),
            "peak": self._line(p["device"], pal.GPU, "peak in step", dashed=True),
            "host": self._line(p["device"], pal.CPU, "host KV"),
            "verifier_device": self._line(p["device"], pal.VERIFIER, "verifier device KV"),
            "verifier_host": self._line(p["device"], pal.VERIFIER, "verifier host KV", dashed=True),
            "step": self._line(p["copy"], pal.STEP_TIME, "step"),
            "copy": self._line(p["copy"], pal.MEASURED, "measured copy"),
            "modelled": self._line(p["copy"], pal.MODELLED, "modelled PCIe", dashed=True),
        }

    def redraw(self, name: str, s: ChartSeries) -> None:
        """Plot `name`'s curves from the series, and its ranges."""
        spoken = figures_in_words(s)
        if self.canvas.accessibleDescription() != spoken:
            self.canvas.setAccessibleDescription(spoken)
        c = self.curves
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
            self._redraw_budget(s.budget_bytes)
            budget = [] if s.budget_bytes is None else [s.budget_bytes]
            shown = [*s.device_bytes, *s.peak_device_bytes, *s.host_bytes, *budget, *s.verifier_device_bytes,
                     *s.verifier_host_bytes]
            fit_ranges(self.plots[name], s.memory_steps, shown)
        if name in BAR_PLOTS:
            self._fit_bars(name)

    def _redraw_budget(self, budget: int | None) -> None:
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


def figures_in_words(s: ChartSeries) -> str:
    """The charts' latest figures in one sentence: a screen reader reads the canvas's description, not its lines."""
    parts = []
    if s.transfer_steps:
        x, h2d, d2h = s.traffic()
        _, total_h2d, total_d2h = s.traffic(cumulative=True)
        parts.append(f"step {x[-1]}: PCIe {fmt.size(h2d[-1])} to the device and {fmt.size(d2h[-1])} back, "
                     f"{fmt.size(total_h2d[-1])} and {fmt.size(total_d2h[-1])} in all; step time "
                     f"{fmt.seconds(s.step_seconds[-1])}, copies {fmt.seconds(s.copy_seconds[-1])}, "
                     f"{s.stall_share[-1]:.0%} waiting for copies")
    if s.memory_steps:
        budget = "" if s.budget_bytes is None else f" of a {fmt.size(s.budget_bytes)} budget"
        parts.append(f"KV {fmt.size(s.device_bytes[-1])} on the device{budget}, {fmt.size(s.host_bytes[-1])} on "
                     "the host")
    if not parts:
        return "No run yet."
    return ("Emulated GPU. " if s.emulated else "") + "; ".join(parts) + "."


def _make_plot(name: str) -> pg.PlotItem:
    left = {"copy": SecondsAxis, "stall": ShareAxis}.get(name, BytesAxis)("left")
    plot = pg.PlotItem(axisItems={"bottom": StepAxis("bottom"), "left": left})
    plot.showGrid(x=True, y=True, alpha=0.15)
    plot.setMenuEnabled(False)
    plot.setMouseEnabled(x=False, y=False)
    for side in ("left", "bottom"):
        axis = plot.getAxis(side)
        axis.setTextPen(pg.mkPen(pal.MUTED_TEXT))
        # Ticks, labels and grid are replayed from a picture on every paint of the plot (~2 ms
        # an axis); cached, an axis is drawn again only when its range changes.
        axis.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
    plot.getAxis("left").setWidth(LEFT_AXIS_PX)  # tick labels of a new width must not lay the canvas out
    plot.setPreferredWidth(PLOT_PREFERRED_PX)  # nor a longer title: the two columns stay equal
    plot.setLabel("bottom", "step", color=pal.MUTED_TEXT)
    return plot


def _line_pen(colour: str, dashed: bool, ratio: float) -> QPen:
    return pg.mkPen(colour, width=2 * ratio, style=Qt.PenStyle.DashLine if dashed else Qt.PenStyle.SolidLine)
