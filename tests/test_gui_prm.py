"""A PRM in the window: picked from the verifier list or a folder, refused with a dialog when it is none,
named in the status bar, and a real search with a synthetic PRM runs to the end."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QFileDialog, QMessageBox

from app.gui.bridge import SearchBridge, default_run
from app.gui.main_window import MainWindow
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.verifiers.synthetic_prm import save_synthetic_prm
from tests.test_gui_bridge import CountingLoader, run_fake
from tests.test_gui_window import run_to_end


@pytest.fixture
def make_window(keep_window, tmp_path):
    def make(loader: Any = None, run: Any = run_fake) -> MainWindow:
        bridge = SearchBridge(loader=loader or CountingLoader(), run=run)
        return keep_window(MainWindow(bridge, settings=QSettings(str(tmp_path / "beamwise.ini"),
                                                                 QSettings.Format.IniFormat)))

    return make


@pytest.fixture
def warnings(monkeypatch) -> list[tuple[str, str]]:
    shown: list[tuple[str, str]] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, title, text, *a: shown.append((title, text)))
    return shown


def pick(window: MainWindow, data: str) -> None:
    picker = window.controls.verifier
    index = picker.findData(data)
    picker.activated.emit(index)


def test_the_picker_lists_logprob_self_judge_and_a_prm_folder(make_window):
    picker = make_window().controls.verifier
    items = [picker.itemText(i) for i in range(picker.count())]
    assert items[:2] == ["log-prob (fast)", "self-judge (asks the model)"]
    assert items[-1] == "PRM from a folder…"
    assert any("synthetic:tiny-qwen-prm" in text for text in items)


def test_a_synthetic_prm_becomes_the_search_config(make_window):
    window = make_window()
    pick(window, "prm:synthetic:tiny-skywork-prm")
    _, search, _ = window.controls.configs()
    assert (search.verifier, search.verifier_model) == ("prm", "synthetic:tiny-skywork-prm")


def test_a_prm_folder_is_detected_and_kept(make_window, monkeypatch, tmp_path):
    folder = save_synthetic_prm("tiny-qwen-prm", tmp_path / "my-prm")
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
    window = make_window()
    pick(window, "<prm-folder>")
    _, search, _ = window.controls.configs()
    assert (search.verifier, search.verifier_model) == ("prm", str(folder))
    assert window.controls.verifier.currentText() == "PRM my-prm (Qwen2.5-Math-PRM)"
    window.controls.set_configs(ModelSpec(), SearchConfig(), CacheConfig())  # and back from saved settings
    window.controls.set_configs(ModelSpec(), SearchConfig(verifier="prm", verifier_model=str(folder)), CacheConfig())
    assert window.controls.configs()[1].verifier_model == str(folder)


def test_a_folder_that_is_not_a_prm_gets_a_dialog_and_changes_nothing(make_window, monkeypatch, tmp_path,
                                                                     warnings):
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(tmp_path))
    window = make_window()
    window.dialogs = True
    pick(window, "<prm-folder>")
    assert window.controls.configs()[1].verifier == "logprob"
    assert len(warnings) == 1
    title, text = warnings[0]
    assert title == "Not a PRM Beamwise knows" and "no config.json" in text


def test_a_search_with_a_prm_runs_in_the_window(qtbot, make_window, tiny):
    window = make_window(loader=lambda spec, device, progress: tiny, run=default_run)
    search = SearchConfig(beams=2, width=2, step_tokens=4, max_steps=2, step_delimiter=None,
                          verifier="prm", verifier_model="synthetic:tiny-rlhflow-prm")
    window.controls.set_configs(ModelSpec(source="synthetic:tiny-llama"), search, CacheConfig())
    window.question.setPlainText("What is 2+3?")
    last: Any = run_to_end(qtbot, window, timeout=20000)
    assert last.type == "run_finished"
    assert window.status.verifier.text() == "verifier: RLHFlow PRM (synthetic:tiny-rlhflow-prm)"


def test_the_charts_draw_the_verifiers_kv_apart_from_the_generators(qtbot, make_window, tiny):
    window = make_window(loader=lambda spec, device, progress: tiny, run=default_run)
    search = SearchConfig(beams=2, width=2, step_tokens=4, max_steps=2, step_delimiter=None,
                          verifier="prm", verifier_model="synthetic:tiny-qwen-prm")
    cache = CacheConfig(kv_budget_bytes=4_000_000, verifier_kv_share=0.03)
    window.controls.set_configs(ModelSpec(source="synthetic:tiny-llama"), search, cache)
    window.question.setPlainText("What is 2+3?")
    assert run_to_end(qtbot, window, timeout=20000).type == "run_finished"
    charts = window.panels.charts
    charts.flush()
    series = window.session.series
    assert series.verifier_budget_bytes == 120_000
    assert charts.point_count("verifier_device") == charts.point_count("verifier_host") == 2
    _, held = charts.curves["verifier_host"].getData()
    assert list(held) == series.verifier_host_bytes and sum(held) > 0  # the tight share put some on the host
    assert "verifier KV (share 120.0 kB)" in charts.title("device") and "verifier host KV" in charts.title("device")
    tree = window.session.tree
    last = [tree.node(i) for i in tree.nodes if i and tree.node(i).step == 2]
    assert last and all(n.verifier_device_bytes + n.verifier_host_bytes > 0 for n in last)
    window.panels.details.show_node(last[0].id)
    assert window.panels.details.value("verifier_kv").endswith(("on GPU", "on CPU"))
    assert "verifier KV of this step: " in window.panels.tree.tooltip_for(last[0].id)


def test_a_run_whose_verifier_keeps_no_kv_draws_no_verifier_curve(qtbot, make_window, tiny):
    window = make_window(loader=lambda spec, device, progress: tiny, run=default_run)
    search = SearchConfig(beams=2, width=2, step_tokens=4, max_steps=2, step_delimiter=None)
    window.controls.set_configs(ModelSpec(source="synthetic:tiny-llama"), search, CacheConfig())
    window.question.setPlainText("What is 2+3?")
    assert run_to_end(qtbot, window, timeout=20000).type == "run_finished"
    window.panels.charts.flush()
    charts = window.panels.charts
    assert charts.point_count("verifier_device") == 0 and "verifier" not in charts.title("device")


def test_a_prm_that_does_not_fit_beside_the_generator_gets_a_dialog_saying_what_to_do(qtbot, make_window, tiny,
                                                                                        warnings, monkeypatch):
    import engine.verifiers as verifiers
    from engine.verifiers.fit import WeightsDoNotFit, pair_does_not_fit

    def too_big(generator, source, device, dtype):
        raise WeightsDoNotFit(pair_does_not_fit(14 * 10**9, 15 * 10**9, 24 * 10**9, "cuda:0 (test)"))

    monkeypatch.setattr(verifiers, "check_pair_fits", too_big)
    window = make_window(loader=lambda spec, device, progress: tiny, run=default_run)
    search = SearchConfig(beams=2, width=2, step_tokens=4, max_steps=1, step_delimiter=None,
                          verifier="prm", verifier_model="synthetic:tiny-qwen-prm")
    window.controls.set_configs(ModelSpec(source="synthetic:tiny-llama"), search, CacheConfig())
    window.question.setPlainText("What is 2+3?")
    assert run_to_end(qtbot, window, timeout=20000).type == "run_failed"
    title, text = warnings[-1]
    assert title == "The PRM does not fit beside the generator"
    assert "do not both fit" in text and "run the PRM on the CPU" in text
