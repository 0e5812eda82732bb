"""The seed field: a spin box over Python ints, so it takes every seed the command line takes (0 to 2**63-1)."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QAbstractSpinBox, QWidget

from engine.config import SEED_RANGE


class SeedBox(QAbstractSpinBox):
    """A whole number in SEED_RANGE with a spin box's keys (Up/Down, Page Up/Down, the wheel). A QSpinBox holds 32
    bits: a seed above 2**31-1 from the command line or a recorded session raised OverflowError and aborted the
    window. Digits only; a number past the range cannot be typed; an emptied field shows its last value again."""

    value_changed = Signal(object)  # the new seed, a Python int (a Qt int signal would cut it to 32 bits)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._value = SEED_RANGE[0]
        self.lineEdit().setText(str(self._value))
        self.lineEdit().textEdited.connect(self._take_text)
        self.editingFinished.connect(self._show_value)

    def value(self) -> int:
        return self._value

    def set_value(self, value: int) -> None:
        """Show `value`, clamped to SEED_RANGE (SearchConfig refuses a seed outside it before it gets here)."""
        value = min(max(int(value), SEED_RANGE[0]), SEED_RANGE[1])
        changed = value != self._value
        self._value = value
        self._show_value()
        if changed:
            self.value_changed.emit(value)

    def _take_text(self, text: str) -> None:
        if text and self.validate(text, 0)[0] == QValidator.State.Acceptable and int(text) != self._value:
            self._value = int(text)
            self.value_changed.emit(self._value)

    def _show_value(self) -> None:
        if self.lineEdit().text() != str(self._value):
            self.lineEdit().setText(str(self._value))

    def validate(self, text: str, pos: int) -> tuple[QValidator.State, str, int]:
        if not text:
            return QValidator.State.Intermediate, text, pos
        if not text.isascii() or not text.isdigit() or int(text) > SEED_RANGE[1]:
            return QValidator.State.Invalid, text, pos
        return QValidator.State.Acceptable, text, pos

    def fixup(self, text: str) -> str:
        return str(self._value)

    def stepBy(self, steps: int) -> None:
        self.set_value(self._value + steps)
        self.selectAll()

    def stepEnabled(self) -> QAbstractSpinBox.StepEnabledFlag:
        flags = QAbstractSpinBox.StepEnabledFlag.StepNone
        if self._value > SEED_RANGE[0]:
            flags |= QAbstractSpinBox.StepEnabledFlag.StepDownEnabled
        if self._value < SEED_RANGE[1]:
            flags |= QAbstractSpinBox.StepEnabledFlag.StepUpEnabled
        return flags
