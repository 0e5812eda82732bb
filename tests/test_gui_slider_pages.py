"""Page Up / Down on a settings slider moves whole arrow steps, as its spin box does (QSlider's own page of 10 counts
moved the KV budget, in 16 MB steps, 32 -> 42 MB: less than one arrow and off the arrows' grid)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from app.gui.controls import SearchControls
from app.gui.slider_spin import PAGE_STEPS, SliderSpin


@pytest.fixture
def sliders(qtbot) -> Iterator[dict[str, SliderSpin]]:
    controls = SearchControls()
    qtbot.addWidget(controls)
    found = {name: value for name, value in vars(controls).items() if isinstance(value, SliderSpin)}
    assert {"kv_budget", "prefill_chunk", "prefix_ram", "temperature", "beams"} <= found.keys()
    yield found  # the panel held until the test ends: its sliders are its children


def pressed(control: SliderSpin, key: Qt.Key) -> float:
    QTest.keyClick(control.slider, key)
    return control.value()


def test_page_keys_on_every_slider_move_ten_arrow_steps_on_the_arrows_grid(sliders):
    for name, control in sliders.items():
        low, high, step = control.spin.minimum(), control.spin.maximum(), control.spin.singleStep()
        control.set_value(low)
        control.slider.setFocus()
        arrow = pressed(control, Qt.Key.Key_Right)
        paged = pressed(control, Qt.Key.Key_PageUp)
        assert arrow == pytest.approx(low + step), name
        assert paged == pytest.approx(min(arrow + PAGE_STEPS * step, high)), name  # 16 -> 176 MB, not 26
        steps = (paged - low) / step
        assert steps == pytest.approx(round(steps)), f"{name}: {paged} is off the arrows' grid"
        assert pressed(control, Qt.Key.Key_PageDown) == pytest.approx(arrow), name


def test_a_slider_pages_as_its_spin_box_does(sliders):
    for name, control in sliders.items():
        control.set_value(control.spin.minimum())
        QTest.keyClick(control.spin, Qt.Key.Key_PageUp)  # QAbstractSpinBox: ten single steps
        by_spin = control.value()
        control.set_value(control.spin.minimum())
        control.slider.setFocus()
        assert pressed(control, Qt.Key.Key_PageUp) == pytest.approx(by_spin), name


def test_the_kv_budget_prefill_chunk_and_prefix_ram_pages_of_the_finding(sliders):
    for name, start, paged in (("kv_budget", 32, 192), ("prefill_chunk", 256, 1536), ("prefix_ram", 128, 768)):
        control = sliders[name]
        control.set_value(start)
        control.slider.setFocus()
        assert pressed(control, Qt.Key.Key_PageUp) == paged, name
