"""The status bar keeps the policy the run used at the default 1400 px: ranked last, it was the field a long prompt
field dropped, below "idle N slots" and the candidate-tokens/s."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QApplication, QMainWindow

from app.gui.status_line import StatusLine
from engine import events as ev

PRM = "Qwen2.5-Math-PRM (synthetic:tiny-qwen-prm)"


def test_the_policy_stays_beside_a_long_prompt_field_at_the_default_width(qtbot):
    window = QMainWindow()
    qtbot.addWidget(window)
    status = StatusLine(window)
    window.resize(1400, 900)
    window.show()
    status.apply(ev.RunStarted("How far?", "SmolLM2-135M-Instruct (bundled)", PRM, "cpu (emulated GPU)", True,
                               "layerwise", 495_400, {"max_steps": 4}, {}), live=False)
    status.apply(ev.PrefillDone(6_151, 30.0, cached_tokens=4_096, computed_tokens=2_055), live=False)
    status.idle.setText("idle 120 of 512 slots")
    status.idle.show()
    status.step.setText("step 4/4")
    status.speed.setText("179.9 cand-tok/s")
    status.bar.showMessage("Done: 4 steps, score 0.632, goodput 45.0 tok/s")
    QApplication.processEvents()
    shown = status.shown_fields()
    assert status.policy in shown and status.policy.text() == "policy: layerwise", [f.text() for f in shown]
    assert status.step in shown and status.speed in shown
