"""How the charts share the panel's width: as many side by side as stay legible, the rest in further rows, and
titles that wrap inside their own plot instead of running into the next one.

pyqtgraph sizes a title to its text on one line and gives it a 30 px row; five such titles on a 900 px panel ask
for more than the panel has, and the canvas then draws plots over each other. Here a title wraps at its plot's
width and its row grows to the lines it needs.
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextOption

PLOT_MIN_WIDTH_PX = 250  # narrower, a title takes more lines than the plot has height and step ticks crowd
BODY_MIN_PX = 120  # a plot below its title: the plotting area and the step axis with its label
BODY_FLOOR_PX = 100  # as short as a plot's body gets so a row fits its panel: the plotting area keeps ~60 px
MARGIN_PX = 8  # around the grid of plots
TIGHT_MARGIN_PX = 2  # above and below a single row that must shrink to fit the panel
SPACING_PX = 10  # between two plots, across and down
TITLE_SLACK_PX = 6  # a wrapped title stays this much inside its column, so rounding never widens the layout


def columns_for(width: float, count: int) -> int:
    """Charts per row at `width` px: as many as keep PLOT_MIN_WIDTH_PX each, spread evenly over the rows they
    need (five charts at 900 px: three and two, not four and one)."""
    fits = max(1, min(count, int(width // PLOT_MIN_WIDTH_PX)))
    rows = math.ceil(count / fits)
    return math.ceil(count / rows)


def arrange(layout: pg.GraphicsLayout, plots: list[pg.PlotItem], columns: int) -> None:
    """Put `plots` in `columns` columns, row after row, each column as wide as the others."""
    for plot in plots:
        if plot in layout.items:
            layout.removeItem(plot)
    grid = layout.layout
    grid.setContentsMargins(*(MARGIN_PX,) * 4)
    grid.setSpacing(SPACING_PX)
    for col in range(grid.columnCount()):
        grid.setColumnStretchFactor(col, 1 if col < columns else 0)
    for index, plot in enumerate(plots):
        layout.addItem(plot, row=index // columns, col=index % columns)


def column_width(width: float, columns: int) -> float:
    """Each column's width when the arranged layout is `width` px wide."""
    return (width - 2 * MARGIN_PX - SPACING_PX * (columns - 1)) / columns


def wrap_title(plot: pg.PlotItem, plot_width: float) -> None:
    """Wrap the plot's title at the width above its plotting area, centred, and give its row the lines it needs;
    the plot's minimum height grows with it, so the plotting area keeps BODY_MIN_PX."""
    label = plot.titleLabel
    text = label.item
    text.document().setDefaultTextOption(QTextOption(Qt.AlignmentFlag.AlignHCenter))
    text.setTextWidth(max(40.0, plot_width - plot.getAxis("left").width() - TITLE_SLACK_PX))
    label.updateMin()
    height = text.boundingRect().height()
    label.setMaximumHeight(height)
    plot.layout.setRowFixedHeight(0, height)
    set_body(plot, BODY_MIN_PX)


def set_body(plot: pg.PlotItem, body: float) -> None:
    """The plot at least its wrapped title's height and `body` px below it."""
    plot.setMinimumHeight(plot.titleLabel.maximumHeight() + body)


def fit_one_row(layout: pg.GraphicsLayout, plots: list[pg.PlotItem], over: float) -> None:
    """A single row `over` px taller than its panel: thinner margins above and below, then shorter bodies (down
    to BODY_FLOOR_PX), so the titles and the step axes all show without a scroll bar cutting them."""
    grid = layout.layout
    grid.setContentsMargins(MARGIN_PX, TIGHT_MARGIN_PX, MARGIN_PX, TIGHT_MARGIN_PX)
    over -= 2 * (MARGIN_PX - TIGHT_MARGIN_PX)
    body = max(BODY_FLOOR_PX, BODY_MIN_PX - max(0.0, over))
    for plot in plots:
        set_body(plot, body)
