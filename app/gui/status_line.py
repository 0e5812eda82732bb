"""The status bar's fields: model, device, policy, step i/S, candidate-tokens/s and model-load progress."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QElapsedTimer
from PySide6.QtWidgets import QLabel, QMainWindow, QProgressBar

from engine import events as ev


class StatusLine:
    """Status bar fields: model, device, policy, step i/S, candidate-tokens/s, and the load progress."""

    def __init__(self, window: QMainWindow) -> None:
        bar = self.bar = window.statusBar()
        self._tokens, self._max_steps, self._clock = 0, 0, QElapsedTimer()
        self.model, self.device, self.policy = QLabel("model: -"), QLabel("device: -"), QLabel("policy: -")
        self.verifier = QLabel("verifier: -")
        self.verifier.setToolTip("What scores each step; a PRM shows its family and where it was loaded from")
        self.step, self.speed = QLabel("step -"), QLabel("- cand-tok/s")
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setMaximumWidth(220)
        self.progress.setTextVisible(True)
        self.progress.hide()
        for widget in (self.progress, self.model, self.verifier, self.device, self.policy, self.step, self.speed):
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

    def begin(self, max_steps: int) -> None:
        """A search request starts: step 0/S, no speed yet."""
        self._tokens, self._max_steps = 0, max_steps
        self.step.setText(f"step 0/{max_steps}")
        self.speed.setText("- cand-tok/s")
        self.bar.showMessage("Running…")

    def apply(self, event: Any, live: bool) -> None:
        """Follow the run: policy, step i/S, candidate-tokens/s (measured live; recorded when replayed)."""
        if isinstance(event, ev.RunStarted):
            self._clock.start()
            self._tokens = 0
            self._max_steps = int(event.search.get("max_steps", self._max_steps))
            self.loaded(event.model, event.device)
            self.policy.setText(f"policy: {event.policy}")
            self.verifier.setText(f"verifier: {event.verifier}")
            self.step.setText(f"step 0/{self._max_steps}")
        elif isinstance(event, ev.StepStarted):
            self.step.setText(f"step {event.step}/{self._max_steps}")
        elif isinstance(event, ev.CandidateText):
            self._tokens += event.tokens
            if live and self._clock.isValid() and self._clock.elapsed() > 0:
                self.speed.setText(f"{self._tokens / (self._clock.elapsed() / 1000):.1f} cand-tok/s")
        elif isinstance(event, ev.RunFinished):
            self.speed.setText(f"{event.tokens_per_second:.1f} cand-tok/s")
            self.bar.showMessage(f"Done: {event.steps} steps, score {event.score:.2f}", 15000)
        elif isinstance(event, ev.RunCancelled):
            self.bar.showMessage(f"Stopped after step {event.step}.", 15000)
