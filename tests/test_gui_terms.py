"""The window names its own controls where the engine's messages name command-line options."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from app.gui.terms import CLI_ONLY, WINDOW_LABELS, window_terms
from engine import events as ev
from engine.config import CacheConfig, ModelSpec, SearchConfig
from tests.test_gui_conversation import run_to_end, window_for  # noqa: F401 (a fixture)

ENGINE = Path(__file__).resolve().parent.parent / "engine"


def test_every_option_an_engine_message_names_has_a_control_or_is_one_the_window_never_sees():
    named = {option for path in ENGINE.rglob("*.py")
             for option in re.findall(r"--[a-z][a-z-]*", path.read_text(encoding="utf-8"))}
    assert named, "the scan must find the options the engine names"
    assert named - WINDOW_LABELS.keys() - CLI_ONLY == set()
    assert WINDOW_LABELS.keys() & CLI_ONLY == set()


@pytest.mark.parametrize("engine_text, window_text", [
    ("Run without --entropy-exit, or with the self-judge, Math-Shepherd or RLHFlow verifier.",
     'Run without "Entropy exit", or with the self-judge, Math-Shepherd or RLHFlow verifier.'),
    ("Lower --beams, --width, --max-steps or --step-tokens.",
     'Lower "Kept beams N", "Children per beam M", "Max steps" or "Step tokens".'),
    ("the prm verifier needs a PRM: choose its folder (--verifier-model PATH).",
     "the prm verifier needs a PRM: choose its folder (the Verifier's PRM folder)."),
    ("Or give the verifier less of it (--verifier-kv-share).",
     'Or give the verifier less of it ("Verifier KV share").'),
    ("a --max-candidates cap, a --no-such-option and a -- dash",
     "a --max-candidates cap, a --no-such-option and a -- dash"),
])  # fmt: skip
def test_options_become_the_labels_of_their_controls(engine_text, window_text):
    assert window_terms(engine_text) == window_text


def test_entropy_exit_on_a_prm_without_a_logit_lens_is_refused_before_the_run_naming_the_switch(
        qtbot, window_for):  # noqa: F811
    window = window_for()
    search = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=4, verifier="prm",
                          verifier_model="synthetic:tiny-skywork-prm", entropy_exit=True)
    window.controls.set_configs(ModelSpec("synthetic:tiny-llama"), search, CacheConfig())
    window.question.setPlainText("What is 2+3?")
    refusal = window.controls.error_text()
    assert "Skywork-o1-Open-PRM" in refusal and 'Run without "Entropy exit"' in refusal and "--" not in refusal
    assert not window.run_action.isEnabled() and refusal in window.run_action.toolTip()
    assert window.start_run() is False and refusal in window.statusBar().currentMessage()
    window.controls.entropy_exit.setChecked(False)
    assert window.controls.is_valid() and window.run_action.isEnabled()


def test_the_engines_refusal_of_the_entropy_exit_says_which_switch_to_clear(qtbot, window_for,  # noqa: F811
                                                                            monkeypatch):
    monkeypatch.setattr("app.gui.controls.exit_refusal", lambda *choice: None)  # the family unread up front
    window = window_for()  # the real engine and loader
    reported: list[tuple[str, str]] = []
    window.error_reported.connect(lambda title, text: reported.append((title, text)))
    search = SearchConfig(beams=2, width=2, max_steps=2, step_tokens=4, verifier="prm",
                          verifier_model="synthetic:tiny-qwen-prm", entropy_exit=True)
    window.controls.set_configs(ModelSpec("synthetic:tiny-llama"), search, CacheConfig())
    window.question.setPlainText("What is 2+3?")
    failed = run_to_end(qtbot, window, window.start_run)
    assert isinstance(failed, ev.RunFailed) and "--entropy-exit" in failed.message  # the event keeps the engine's
    ((_, text),) = reported
    assert 'Run without "Entropy exit"' in text and "--" not in text
    window.status.apply(ev.RunFailed("KVBudgetTooSmall", "Raise --kv-budget."), live=False)  # the status bar's own
    assert window.statusBar().currentMessage() == 'Failed: Raise "KV budget".'
