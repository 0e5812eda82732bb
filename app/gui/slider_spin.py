"""A slider and a spin box that show one value: the settings panel's numeric control."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QDoubleSpinBox, QHBoxLayout, QLabel, QSlider, QSpinBox, QVBoxLayout, QWidget


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
        self.note = QLabel()  # what an exact value pinned to the control is, while the control shows it
        self.note.hide()
        self._pinned: tuple[float, str] | None = None
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
        self.spin.setValue(value)

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
