"""The status bar's fields: model, device, policy, step i/S, candidate-tokens/s and model-load progress."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QMainWindow, QProgressBar


class StatusLine:
    """Status bar fields: model, device, policy, step i/S, candidate-tokens/s, and the load progress."""

    def __init__(self, window: QMainWindow) -> None:
        bar = window.statusBar()
        self.model, self.device, self.policy = QLabel("model: -"), QLabel("device: -"), QLabel("policy: -")
        self.step, self.speed = QLabel("step -"), QLabel("- cand-tok/s")
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setMaximumWidth(220)
        self.progress.setTextVisible(True)
        self.progress.hide()
        for widget in (self.progress, self.model, self.device, self.policy, self.step, self.speed):
            bar.addPermanentWidget(widget)
        self.speed.setToolTip("Candidate tokens generated per second (all beams together)")
        self.device.setToolTip("Where the KV cache lives; without CUDA a budgeted CPU pool emulates the GPU")

    def loading(self, message: str, fraction: float) -> None:
        self.progress.show()
        if fraction < 0:
            self.progress.setRange(0, 0)  # busy: a stage of unknown length
        else:
            self.progress.setRange(0, 100)
            self.progress.setValue(round(fraction * 100))
        self.progress.setFormat(f"{message[:40]} %p%")
        self.progress.setToolTip(message)

    def loaded(self, name: str | None, device: str | None) -> None:
        self.progress.hide()
        self.model.setText(f"model: {name or 'not loaded'}")
        if device:
            self.device.setText(f"device: {device}")
