"""The window's plan bar says a plan's sentence in the window's terms: its controls' labels, never an option the
window has no control for."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from app.gui.terms import WINDOW_LABELS, window_terms
from app.planner import DeviceInfo, plan
from engine.config import CacheConfig, ModelSpec, SearchConfig
from tests.test_gui_conversation import window_for  # noqa: F401 (a fixture)

APP = Path(__file__).resolve().parent.parent / "app"
PLAN_MODULES = ("planner.py", "plan_advice.py", "plan_roles.py", "plan_run.py")
TINY = ModelSpec("synthetic:tiny-llama")
SMALL = SearchConfig(beams=2, width=2, step_tokens=16, max_steps=4)
ONE = SearchConfig(beams=1, width=1, step_tokens=4, max_steps=1)
PRM = SearchConfig(beams=2, width=2, step_tokens=16, max_steps=4, verifier="prm",
                   verifier_model="synthetic:tiny-qwen-prm")
EMULATED = "cpu (emulated GPU)"


def _sentences() -> list[str]:
    """A red plan's sentence for each kind of advice a plan names options in."""
    settings = [
        (SMALL, CacheConfig(prefix_cache=True, prefix_cache_ram_bytes=1000), DeviceInfo(EMULATED, True, 10**10)),
        (ONE, CacheConfig(), DeviceInfo(EMULATED, True, 700_000)),  # the weights alone do not fit
        (ONE, CacheConfig(), DeviceInfo(EMULATED, True, 800_000)),  # the search does not: fewer beams or bfloat16
        (PRM, CacheConfig(), DeviceInfo("cuda (test)", False, 10**9)),
        (PRM, CacheConfig(kv_budget_bytes=20_000), DeviceInfo(EMULATED, True, 10**10)),
        (PRM, CacheConfig(kv_budget_bytes=200_000, verifier_kv_share=0.1), DeviceInfo(EMULATED, True, 10**10)),
    ]
    plans = [plan(TINY, search, cache, question="What is 2+3?", device=device) for search, cache, device in settings]
    assert {p.state for p in plans} == {"red"}
    return [p.sentence for p in plans]


def _options_in_strings(path: Path) -> set[str]:
    """The options named in a module's strings (its docstrings left out): what its messages can say."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef) and ast.get_docstring(node) is not None}
    return {option for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
            for option in re.findall(r"--[a-z][a-z-]*", node.value)}


def test_every_plan_sentence_with_advice_reads_in_the_windows_terms():
    """The bar painted the plan's sentence as the command line has it: "Use --prefix-cache-ram 110592 or more, or
    run with --no-prefix-cache.", and "--dtype bfloat16", which the window cannot set."""
    sentences = _sentences()
    for sentence in sentences:
        assert "--" not in window_terms(sentence), sentence
    named = {option for sentence in sentences for option in re.findall(r"--[a-z][a-z-]*", sentence)}
    assert {"--prefix-cache-ram", "--no-prefix-cache", "--dtype", "--verifier-device", "--verifier-kv-share"} <= named
    in_plans = set().union(*(_options_in_strings(APP / name) for name in PLAN_MODULES))
    assert in_plans, "the scan must find the options the plan's own sentences name"
    assert in_plans - WINDOW_LABELS.keys() - named == set()  # each is a control's label or reworded above


def test_the_prefix_cache_advice_is_in_the_sliders_whole_megabytes():
    said = window_terms("Use --prefix-cache-ram 110592 or more, or run with --no-prefix-cache.")
    assert said == 'Set "Prefix cache RAM" to 1 MB or more (or auto), or turn the "prefix cache" switch off.'
    assert "3 MB or more" in window_terms("Use --prefix-cache-ram 2000001 or more, or run with --no-prefix-cache.")


def test_advice_the_window_cannot_follow_is_left_out_and_the_rest_kept():
    assert window_terms("which the run refuses: load the weights in bfloat16 (--dtype bfloat16: about 5.0 kB in "
                        "all) or pick a smaller model.") == "which the run refuses: pick a smaller model."
    assert window_terms("lower the beams, the width or the steps, or load the weights in bfloat16 (--dtype "
                        "bfloat16: about 5.0 kB in all).") == "lower the beams, the width or the steps."


def test_the_plan_bar_shows_the_prefix_cache_refusal_in_the_windows_words(qtbot, window_for):  # noqa: F811
    window = window_for()
    window.controls.set_configs(TINY, SMALL, CacheConfig(prefix_cache=True, prefix_cache_ram_bytes=1000))
    window.question.setPlainText("What is 17 * 23?")
    with qtbot.waitSignal(window.plan_bar.planned, timeout=60_000) as blocker:
        window.plan_bar.refresh_now()
    assert blocker.args[0].state == "red" and "--prefix-cache-ram" in blocker.args[0].sentence
    shown = window.plan_bar._sentence
    assert '"Prefix cache RAM" to 1 MB or more' in shown and "--" not in shown
