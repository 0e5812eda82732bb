"""The note when a run is on the emulated GPU although an NVIDIA GPU is present: what is wrong and what to install."""

from __future__ import annotations

from app.gpu_check import emulated_reason


def test_no_note_with_cuda_or_without_an_nvidia_gpu():
    assert emulated_reason("12.8", True, gpu_present=lambda: True) is None
    assert emulated_reason(None, False, gpu_present=lambda: False) is None


def test_a_cpu_build_of_torch_beside_an_nvidia_gpu_says_how_to_get_the_cuda_build():
    note = emulated_reason(None, False, gpu_present=lambda: True)
    assert "CPU build" in note and "pip install torch==2.13.0 --index-url" in note


def test_a_cuda_build_that_cannot_use_the_gpu_points_at_the_driver():
    note = emulated_reason("12.8", False, gpu_present=lambda: True)
    assert "CUDA 12.8" in note and "driver" in note


def test_the_window_marks_the_device_field_and_puts_the_fix_in_its_tooltip(qtbot, monkeypatch):
    from PySide6.QtWidgets import QMainWindow

    from app.gui import status_line
    from benchmarks.fake_search import fake_run

    monkeypatch.setattr(status_line, "emulated_hint", lambda: "an NVIDIA GPU is present, but this torch is a CPU build")
    window = QMainWindow()
    qtbot.addWidget(window)
    line = status_line.StatusLine(window)
    started = next(iter(fake_run("How fast?")))
    assert started.emulated
    line.apply(started, live=True)
    assert line.device.text().endswith("⚠") and "CPU build" in line.device.toolTip()
    line.show_device_hint(None)
    assert not line.device.text().endswith("⚠") and "NVIDIA" not in line.device.toolTip()
