"""The window shows the layer-entropy exit's figures: mean exit layer and layer work saved, in the status
line (over the run) and in the node details (over the node's step)."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from app.eval_exit import ExitTally
from engine import search as engine_search
from tests.test_gui_window import run_to_end, small


@pytest.fixture
def real_run(tiny_qwen2):
    """The engine's search on the tiny Qwen2 (6 layers; its self-judge has a lens), whatever the window loaded."""
    seen: list = []

    def run(question, _loaded, search, cache, *, should_stop):
        for event in engine_search.run(question, tiny_qwen2, search, cache, should_stop=should_stop):
            seen.append(event)
            yield event

    run.seen = seen
    return run


def test_a_run_with_the_entropy_exit_shows_its_layer_and_work_saved(qtbot, make_window, real_run, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))  # no calibrated thresholds
    window = make_window(run=real_run)
    small(window, beams=2, width=2, max_steps=2, step_tokens=4, step_delimiter=None, verifier="self-judge",
          entropy_exit=True, entropy_theta=1000.0, entropy_delta=1000.0)  # fires at layer 2 of 6
    terminal = run_to_end(qtbot, window, timeout=120_000)
    assert terminal.type == "run_finished", terminal
    selected = [e for e in real_run.seen if e.type == "step_selected"]
    whole = ExitTally.of_steps(selected)
    assert whole.mean_layer == 2.0 and 0 < whole.saved < 1
    assert not window.status.exit.isHidden()
    assert window.status.exit.text() == f"exit: layer 2 of 6 · {whole.saved:.0%} saved"
    details = window.panels.details
    node = next(e for e in real_run.seen if e.type == "candidate_scored" and e.step == 2)
    details.show_node(node.id)
    step = ExitTally.of_steps([selected[1]])
    assert details.value("verifier_exit") == f"⚠ layer 2 of 6 · {step.saved:.0%} saved"  # the mark: see the tooltip
    tip = details.values["verifier_exit"].toolTip()
    assert f"saving {step.saved:.0%} of its layer work" in tip  # the figures in words
    assert "stopped every candidate at layer 2 of 6" in tip and "switch Entropy exit off" in tip  # and what to do

    real_run.seen.clear()
    small(window, beams=2, width=2, max_steps=1, step_tokens=4, step_delimiter=None, verifier="self-judge")
    assert run_to_end(qtbot, window, timeout=120_000).type == "run_finished"
    assert window.status.exit.isHidden()  # exit off: no figure
    details.show_node(next(e.id for e in real_run.seen if e.type == "candidate_scored"))
    assert details.value("verifier_exit") == "–"
    assert details.values["verifier_exit"].toolTip() == ""
