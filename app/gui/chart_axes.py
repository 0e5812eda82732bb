"""Chart axes that read at a glance: steps in whole numbers, bytes and seconds in the units the settings use."""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import QRectF

import app.formatting as fmt

STEP_TICK_PX = 32  # a step tick's room on a narrow plot: "prompt" beside "1" does not touch it
PROMPT_OVERHANG_PX = 30  # how far the "prompt" label may reach left of the plot (its half is ~21 px)


class StepAxis(pg.AxisItem):
    """Ticks only on whole steps (never 0.6 … 2.4), at most about eight of them and fewer on a narrow plot (one per
    STEP_TICK_PX of its `size` in pixels); 0, where shown, is the prompt. Its label may reach PROMPT_OVERHANG_PX
    past the plot's left edge, under the empty corner below the y axis: on a plot under ~210 px half a step is
    narrower than half of "prompt", and pyqtgraph drops a label that leaves its axis."""

    def boundingRect(self) -> QRectF:
        """pyqtgraph's, reaching PROMPT_OVERHANG_PX further left (its own tolerance for labels past the ends is
        ignored on a plot with a grid)."""
        return super().boundingRect().adjusted(-PROMPT_OVERHANG_PX, 0, 0, 0)

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:
        first, last = max(0, math.ceil(minVal)), math.floor(maxVal)
        if last < first:
            return [(1.0, [])]
        most = max(2, min(8, int(size // STEP_TICK_PX)))
        spacing = max(1, math.ceil((last - first + 1) / most))
        return [(float(spacing), [float(v) for v in range(first, last + 1, spacing)])]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        return ["prompt" if v == 0 else str(int(v)) for v in values]


class BytesAxis(pg.AxisItem):
    """Tick labels such as '0 B', '500 kB', '32 MB' (decimal, as --kv-budget and the settings)."""

    def __init__(self, orientation: str = "left") -> None:
        super().__init__(orientation)
        self.enableAutoSIPrefix(False)  # no '(mB)' for a plot of zeros: the unit is in every tick

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:
        """pyqtgraph's ticks less those between whole bytes: a plot of zeros shows '0 B' once, not '0 B 0 B 1 B'."""
        levels = [(spacing, values) for spacing, values in super().tickValues(minVal, maxVal, size) if spacing >= 1]
        return levels or [(1.0, [0.0] if minVal <= 0 <= maxVal else [])]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        return [fmt.axis_size(max(0.0, v)) for v in values]


class SecondsAxis(pg.AxisItem):
    """Tick labels in ms below a second, else s."""

    def __init__(self, orientation: str = "left") -> None:
        super().__init__(orientation)
        self.enableAutoSIPrefix(False)

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        return [f"{v * 1000:.3g} ms" if abs(v) < 1 else f"{v:.3g} s" for v in values]


class ShareAxis(pg.AxisItem):
    """Tick labels in percent of a share 0 … 1."""

    def __init__(self, orientation: str = "left") -> None:
        super().__init__(orientation)
        self.enableAutoSIPrefix(False)

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        return [f"{v:.0%}" for v in values]


def fit_ranges(plot: pg.PlotItem, steps: list[int], values: list[float], first: int = 1) -> None:
    """x: the steps recorded (`first` … n, or 1 when empty; first 0 shows the prompt); y: from 0 to a little above
    the largest value (0 … 1 when nothing moved), so an empty or all-zero plot shows no negative ticks; no y ticks
    at all without values (a time plot showed 200 … 800 ms before any run)."""
    last = max(steps, default=1)
    plot.setXRange(first - 0.5, max(1, last) + 0.5, padding=0)
    finite = [v for v in values if v is not None and math.isfinite(v)]
    plot.getAxis("left").setTicks(None if finite else [[]])
    top = max(finite, default=0.0)
    plot.setYRange(0, top * 1.15 if top > 0 else 1.0, padding=0)
