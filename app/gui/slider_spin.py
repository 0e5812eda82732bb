"""A slider and a spin box that show one value: the settings panel's numeric control."""

from __future__ import annotations

import math
from typing import TypeVar

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QDoubleSpinBox, QHBoxLayout, QLabel, QSlider, QSpinBox, QVBoxLayout, QWidget

QT_INT_MAX = 2**31 - 1  # a slider and a QSpinBox count in 32-bit ints
PAGE_STEPS = 10  # single steps in a page: Page Up / Down on a QSpinBox moves ten, and the slider pages as it does
S = TypeVar("S")


def kept_setting(held: tuple[float | None, S], value: float, own: S) -> S:
    """The setting in `held` (the value a control showed when that setting was shown on it, the setting) while the
    control's `value` is still that one, else `own` (what its value means): a run uses what was set (200 kB, 0.333,
    a count past what a spin box holds), not what the control rounds it to."""
    shown, setting = held
    return setting if value == shown else own


class SliderSpin(QWidget):
    """A slider and a spin box kept in step; floats use a slider scaled by 10**decimals."""

    value_changed = Signal(float)

    def __init__(self, low: float, high: float, *, decimals: int = 0, step: float = 1, tooltip: str = "",
                 suffix: str = "", special: str = "") -> None:
        super().__init__()
        self._scale = 10**decimals
        self.spin = QDoubleSpinBox() if decimals else QSpinBox()
        if decimals:
            self.spin.setDecimals(decimals)
        self.spin.setRange(low, high)
        self.spin.setSingleStep(step)
        self.spin.setSuffix(suffix)
        self.spin.setSpecialValueText(special)
        self.spin.setKeyboardTracking(False)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(round(low * self._scale), round(high * self._scale))
        self.slider.setSingleStep(round(step * self._scale))
        # QSlider's own page is 10 counts whatever the step: Page Up on the KV budget (16 MB steps) went 32 -> 42 MB,
        # less than one arrow and off the arrows' grid. Whole steps keep it there.
        self.slider.setPageStep(PAGE_STEPS * self.slider.singleStep())
        self.note = QLabel()  # what an exact value pinned to the control is, while the control shows it
        self.note.hide()
        self._pinned: tuple[float, str] | None = None
        self._setting: tuple[float | None, object] = (None, None)  # the value shown when set, and the setting then
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.slider, 3)
        row.addWidget(self.spin, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(row)
        layout.addWidget(self.note)
        self.setToolTip(tooltip)
        self.slider.valueChanged.connect(self._from_slider)
        self.spin.valueChanged.connect(self._from_spin)

    def set_name(self, name: str) -> None:
        """Name the slider and the spin box for a screen reader: the form's label is the pair's, not theirs."""
        self.slider.setAccessibleName(name)
        self.spin.setAccessibleName(name)

    def value(self) -> float:
        return self.spin.value()

    def set_value(self, value: float) -> None:
        """Show `value`; one past the range's end grows the range to hold it (`gui --max-steps 200` ran 64 steps on
        a 1-64 slider). Below the start, or past what the control can count, it shows `nearest(value)`."""
        if value > self.spin.maximum():
            self._grow_to(value)
        self.spin.setValue(self.nearest(value))

    def nearest(self, value: float) -> float:
        """What the control shows for `value`: within its range (grown as `set_value` grows it), to its decimals."""
        top = max(self.spin.maximum(), min(value, self._most()))
        clamped = min(max(value, self.spin.minimum()), top)
        return round(clamped, self.spin.decimals()) if self._scale > 1 else round(clamped)

    def _most(self) -> float:
        """The largest value both the spin box and the slider (counting in 1/10**decimals) can hold."""
        return QT_INT_MAX // self._scale if self._scale > 1 else QT_INT_MAX

    def _grow_to(self, value: float) -> None:
        top = min(math.ceil(value * self._scale), QT_INT_MAX)  # in the slider's counts
        self.slider.setMaximum(top)
        self.spin.setMaximum(top / self._scale if self._scale > 1 else top)

    def show_number(self, value: float) -> None:
        """Show a setting in the control's own unit (`nearest` it, and the setting written under it where the two
        differ: 0.333 on a control of hundredths, 0.5 GB/s on one of whole GB/s); `number()` gives it back as set."""
        shown = self.nearest(value)
        self.show_setting(shown, None if shown == value else f"{value:,}{self.spin.suffix()}", value)

    def show_setting(self, shown: float, exact: str | None, setting: object) -> None:
        """Show `shown` (`exact` under it, when given) and keep `setting`, the config's own value, for as long as the
        control shows `shown`: a run uses what was set (200 kB, 0.333), not what the control rounds it to."""
        self.pin(shown, exact)
        self._setting = (self.spin.value(), setting)

    def kept(self, own: object) -> object:
        """The setting last shown while the control still shows it, else `own` (what the control's value means)."""
        return kept_setting(self._setting, self.spin.value(), own)

    def number(self) -> float:
        """The control's value, or the setting it was shown for while it still shows that (`show_number`)."""
        return self.kept(self.spin.value())

    def pin(self, value: float, exact: str | None) -> None:
        """Show `value`, and under it `exact` (what the setting really is) for as long as the control shows that
        value: a size its unit cannot show (300 kB given by --kv-budget on a control of whole MB showed "1 MB")."""
        self._pinned = None
        self.set_value(value)
        self._pinned = None if exact is None else (self.spin.value(), exact)  # within the control's range
        self._show_pin()

    def _show_pin(self) -> None:
        shown = self._pinned is not None and self.spin.value() == self._pinned[0]
        self.note.setVisible(shown)
        if shown:
            self.note.setText(f"set to {self._pinned[1]}; move it to change")

    def _from_slider(self, raw: int) -> None:
        self.spin.setValue(raw / self._scale if self._scale > 1 else raw)

    def _from_spin(self, value: float) -> None:
        self.slider.blockSignals(True)
        self.slider.setValue(round(value * self._scale))
        self.slider.blockSignals(False)
        self._show_pin()
        self.value_changed.emit(float(value))
