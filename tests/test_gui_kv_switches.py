"""The window's KV settings carry the LBS switches and the emulated PCIe bandwidth both ways."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from app.gui.controls import SearchControls
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.errors import format_bytes


def test_kv_switches_and_bandwidth_round_trip(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    controls = SearchControls()
    qtbot.addWidget(controls)
    cache = CacheConfig(policy="lbs", inter_beam=True, balanced_prefetch=False, prefix_order=False, pcie_gbps=16.0)
    controls.set_configs(ModelSpec(), SearchConfig(), cache)
    _, _, built = controls.configs()
    switches = (built.inter_beam, built.balanced_prefetch, built.prefix_order)
    assert switches == (True, False, False) and built.pcie_gbps == 16.0
    with qtbot.waitSignal(controls.changed):
        controls.switches["prefix_order"].setChecked(True)
    _, _, built = controls.configs()
    assert built.prefix_order and not built.balanced_prefetch and not built.speculative
    controls.switches["speculative"].setChecked(True)
    _, _, built = controls.configs()
    assert built.speculative
    controls.set_configs(ModelSpec(), SearchConfig(), CacheConfig(speculative=False))
    assert not controls.switches["speculative"].isChecked()
    assert all(box.toolTip() for box in controls.switches.values())


def test_the_verifier_share_and_a_prm_on_the_cpu_round_trip(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    controls = SearchControls()
    qtbot.addWidget(controls)
    search = SearchConfig(verifier="prm", verifier_model="synthetic:tiny-qwen-prm", verifier_device="cpu")
    controls.set_configs(ModelSpec(), search, CacheConfig(verifier_kv_share=0.25))
    _, built_search, built = controls.configs()
    assert built.verifier_kv_share is None and built_search.verifier_device == "cpu"  # its KV is outside the budget
    controls.verifier_on_cpu.setChecked(False)
    assert controls.configs()[2].verifier_kv_share == 0.25  # the share kept for the PRM on the GPU
    with qtbot.waitSignal(controls.changed):
        controls.verifier_share.set_value(0)
    _, _, built = controls.configs()
    assert built.verifier_kv_share is None  # auto: one verification batch (FlashTTS)
    assert controls.verifier_share.spin.specialValueText() == "auto"
    assert "verification batch" in controls.verifier_share.toolTip() and controls.verifier_on_cpu.toolTip()
    controls.set_configs(ModelSpec(), SearchConfig(verifier="logprob"), CacheConfig())
    assert not controls.verifier_on_cpu.isEnabled()  # only a PRM can move to the CPU
    assert controls.configs()[1].verifier_device == "auto"


def test_the_prefill_chunk_round_trips_and_zero_means_auto(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    controls = SearchControls()
    qtbot.addWidget(controls)
    controls.set_configs(ModelSpec(), SearchConfig(), CacheConfig(policy="headwise", prefill_chunk=512))
    _, _, built = controls.configs()
    assert built.prefill_chunk == 512 and built.policy == "headwise"
    with qtbot.waitSignal(controls.changed):
        controls.prefill_chunk.set_value(0)
    _, _, built = controls.configs()
    assert built.prefill_chunk is None  # auto: sized to the budget
    assert controls.prefill_chunk.spin.specialValueText() == "auto" and "head-wise" in controls.prefill_chunk.toolTip()


def test_the_prefix_cache_switch_and_caps_round_trip(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    controls = SearchControls()
    qtbot.addWidget(controls)
    _, _, built = controls.configs()
    assert built.prefix_cache and built.prefix_cache_ram_bytes is None and built.prefix_cache_disk_bytes is None
    cache = CacheConfig(prefix_cache=True, prefix_cache_ram_bytes=512_000_000, prefix_cache_disk_bytes=5_000_000_000)
    controls.set_configs(ModelSpec(), SearchConfig(), cache)
    _, _, built = controls.configs()
    assert (built.prefix_cache_ram_bytes, built.prefix_cache_disk_bytes) == (512_000_000, 5_000_000_000)
    controls.switches["prefix_cache"].setChecked(False)
    controls.prefix_ram.set_value(0)
    _, _, built = controls.configs()
    assert not built.prefix_cache and built.prefix_cache_ram_bytes is None
    assert controls.prefix_ram.spin.specialValueText() == "auto" and "free" in controls.prefix_disk.toolTip()


def test_the_status_line_shows_cached_prompt_tokens():
    from app.gui.status_line import prompt_text
    from engine import events as ev

    assert prompt_text(ev.PrefillDone(120, 0.1)) == "prompt: 120 tok"
    assert prompt_text(ev.PrefillDone(120, 0.1, 96, 24)) == "prompt: 120 tok (96 cached)"


def test_the_status_bar_says_when_the_prefix_cache_cannot_write_its_folder(qtbot):
    from PySide6.QtWidgets import QMainWindow

    from app.gui.status_line import StatusLine
    from engine import events as ev

    window = QMainWindow()
    qtbot.addWidget(window)
    line = StatusLine(window)
    line.apply(ev.PrefillDone(120, 0.1, 96, 24), live=True)
    assert line.bar.currentMessage() == ""
    line.apply(ev.PrefillDone(120, 0.1, 0, 120, "/x/prefix-kv: Permission denied"), live=True)
    assert line.bar.currentMessage().startswith(
        "The prefix cache cannot write its disk folder (/x/prefix-kv: Permission denied)")


def test_speculated_children_round_trip_and_follow_the_speculative_switch(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    controls = SearchControls()
    qtbot.addWidget(controls)
    controls.set_configs(ModelSpec(), SearchConfig(), CacheConfig(speculative=True, speculative_continuations=1))
    _, _, built = controls.configs()
    assert built.speculative and built.speculative_continuations == 1 and controls.continuations.isEnabled()
    with qtbot.waitSignal(controls.changed):
        controls.continuations.setValue(0)
    assert controls.configs()[2].speculative_continuations == 0  # FlashTTS's M_i = B - j + 1
    assert controls.continuations.text() == "B - j + 1"
    controls.switches["speculative"].setChecked(False)
    assert not controls.continuations.isEnabled()


def test_lookahead_verification_round_trips_and_follows_the_speculative_switch(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    controls = SearchControls()
    qtbot.addWidget(controls)
    box = controls.switches["lookahead_verify"]
    assert controls.configs()[2].lookahead_verify and "PRM" in box.toolTip()  # on by default
    prm = SearchConfig(verifier="prm", verifier_model="synthetic:tiny-qwen-prm")
    controls.set_configs(ModelSpec(), prm, CacheConfig(speculative=True, lookahead_verify=False))
    assert not box.isChecked() and box.isEnabled()
    with qtbot.waitSignal(controls.changed):
        box.setChecked(True)
    assert controls.configs()[2].lookahead_verify
    controls.switches["speculative"].setChecked(False)
    assert not box.isEnabled()  # it verifies speculated steps: nothing to do without speculation


@pytest.mark.parametrize("search", [SearchConfig(), SearchConfig(verifier="self-judge"),
                                    SearchConfig(verifier="prm", verifier_model="synthetic:tiny-math-shepherd",
                                                 entropy_exit=True)])
def test_lookahead_verification_is_greyed_where_run_refuses_it(qtbot, tmp_path, monkeypatch, search):
    """Only a PRM's pass scores a speculated next step, and the entropy exit cuts that pass short: `run` refuses
    --lookahead-verify there, and the window's switch (enabled whenever speculation was on) did nothing there."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    controls = SearchControls()
    qtbot.addWidget(controls)
    controls.set_configs(ModelSpec(), search, CacheConfig(speculative=True))
    assert not controls.switches["lookahead_verify"].isEnabled()


def test_remembered_settings_from_before_lookahead_verification_load_with_it_on(tmp_path):
    import json

    from PySide6.QtCore import QSettings

    from app.gui.settings import load_configs, save_configs

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    save_configs(settings, ModelSpec(), SearchConfig(), CacheConfig(speculative=True, lookahead_verify=False))
    assert not load_configs(settings)[2].lookahead_verify
    older = CacheConfig(speculative=True).to_dict()
    del older["lookahead_verify"]  # what a window stored before the switch existed
    settings.setValue("cache", json.dumps(older))
    assert load_configs(settings)[2].lookahead_verify


def test_the_status_line_says_how_many_look_aheads_were_used():
    from app.formatting import speculation_text
    from engine import events as ev

    done = ev.RunFinished("5", (3,), 0.5, 2, 10, 1.0, 10.0, speculative_tokens=20, speculative_used=5)
    assert speculation_text(done, "; ") == "; speculated 20 tokens, 5 kept (25%)"
    looked = ev.RunFinished("5", (3,), 0.5, 2, 10, 1.0, 10.0, speculative_tokens=20, speculative_used=5,
                            lookahead_verified=4, lookahead_used=1, lookahead_discarded=3)
    assert speculation_text(looked, "; ").endswith("; 1 of 4 steps verified ahead used")
    lent = ev.RunFinished("5", (3,), 0.5, 2, 10, 1.0, 10.0, speculative_tokens=20, speculative_used=5,
                          speculative_lent_runs=3)
    assert speculation_text(lent, "; ") == "; speculated 20 tokens, 5 kept (25%), 3 runs in other beams' rows"


def test_the_status_tooltip_says_what_goodput_counts_and_keeps_the_answer_paths_rate():
    from app.formatting import goodput_text
    from engine import events as ev

    done = ev.RunFinished("5", (3,), 0.5, 2, 10, 1.0, 10.0, 6.25, answer_tokens_per_second=3.0)
    text = goodput_text(done)
    assert text.startswith("goodput: 6.2 tokens/s") and "completion time" in text
    assert text.endswith("the answer's path: 3.0 tokens/s of the whole run")
    recorded_before = ev.RunFinished("5", (3,), 0.5, 2, 10, 1.0, 10.0, 6.25)  # an older journal: no answer rate
    assert "answer's path" not in goodput_text(recorded_before)


def test_the_status_line_shows_the_steps_idle_row_slots_before_and_after_speculation(qtbot, tiny):
    from PySide6.QtWidgets import QMainWindow

    from app.gui.status_line import PROMPT_TIP, StatusLine
    from engine import events as ev
    from engine.search import run

    window = QMainWindow()
    qtbot.addWidget(window)
    status = StatusLine(window)
    assert status.idle.isHidden()
    search = SearchConfig(beams=4, width=4, step_tokens=10, max_steps=3, step_delimiter="c", seed=1)
    events = list(run("What is 2+3?", tiny, search, CacheConfig(policy="in_device", speculative=True)))
    stats = [e for e in events if isinstance(e, ev.TransferStats)]
    assert any(s.speculative_lent_runs for s in stats), "the case must speculate, in lent rows too"
    for event in events:
        status.apply(event, live=True)
        if isinstance(event, ev.TransferStats):
            after, made, lent = event.idle_row_slots, event.speculative_tokens, event.speculative_lent_runs
            shown = f"idle {after} of {after + made} slots" if made else f"idle {after} slots"
            assert status.idle.text() == shown and not status.idle.isHidden()
            rows = f", {lent} of its runs in other beams' rows" if lent else ""
            assert status.idle.toolTip().endswith(f"The last step: {made} tokens speculated{rows}.") == bool(made)
    assert "before" in status.idle.toolTip() and "after" in status.idle.toolTip()
    assert status.prompt.toolTip().endswith(" computed")  # the run's counts
    status.reset()
    assert status.idle.isHidden()
    assert status.prompt.toolTip() == PROMPT_TIP  # not the last run's counts


def test_a_long_model_name_is_shortened_in_the_status_bar_and_whole_in_its_tooltip(qtbot):
    """The run's messages share the status bar with its fields: a long model folder name must not squeeze them out."""
    from PySide6.QtWidgets import QMainWindow

    from app.gui.status_line import MODEL_WIDTH, StatusLine

    window = QMainWindow()
    qtbot.addWidget(window)
    status = StatusLine(window)
    status.loaded("SmolLM2-135M-Instruct (bundled)", "cpu")
    assert status.model.text() == "model: SmolLM2-135M-Instruct (bundled)" and status.model.toolTip() == ""
    long = "C:/Users/player/models/" + "Meta-Llama-3.1-8B-Instruct-abliterated-q8-merged" * 3
    status.loaded(long, "cuda:0")
    shown = status.model.text()
    assert "…" in shown and shown.startswith("model: C:/") and shown.endswith("merged")
    assert status.model.fontMetrics().horizontalAdvance(shown) <= MODEL_WIDTH
    assert status.model.toolTip() == f"model: {long}"


@pytest.mark.parametrize(
    ("budget", "shown"),
    [(200_000, 1), (1_500_000, 2), (20_000_000_000, 16384)],  # under a MB (not "auto"), between MBs, past the max
)
def test_a_size_the_sliders_cannot_show_exactly_is_run_as_set_until_the_slider_moves(qtbot, tmp_path, monkeypatch,
                                                                                      budget, shown):
    """`gui --kv-budget 200k` ran with an automatic budget: the MB slider showed 0, "auto"."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    controls = SearchControls()
    qtbot.addWidget(controls)
    cache = CacheConfig(kv_budget_bytes=budget, prefix_cache_ram_bytes=budget, prefix_cache_disk_bytes=1_500_000_000)
    controls.set_configs(ModelSpec(), SearchConfig(), cache)
    assert controls.kv_budget.value() == shown and controls.prefix_disk.value() == 2
    _, _, built = controls.configs()
    assert (built.kv_budget_bytes, built.prefix_cache_ram_bytes, built.prefix_cache_disk_bytes) == (
        budget, budget, 1_500_000_000)
    exact = format_bytes(budget)  # the slider showed "1 MB" and the run used 200 kB: the size used is written under it
    assert controls.kv_budget.note.isVisibleTo(controls) and exact in controls.kv_budget.note.text()
    assert controls.prefix_disk.note.isVisibleTo(controls) and "1.5 GB" in controls.prefix_disk.note.text()
    controls.kv_budget.set_value(32)
    controls.prefix_disk.set_value(0)
    assert not controls.kv_budget.note.isVisibleTo(controls) and not controls.prefix_disk.note.isVisibleTo(controls)
    _, _, built = controls.configs()
    assert (built.kv_budget_bytes, built.prefix_cache_ram_bytes, built.prefix_cache_disk_bytes) == (
        32_000_000, budget, None)
    controls.kv_budget.set_value(shown)  # back where the exact size was shown: it is used, and said, again
    assert controls.kv_budget.note.isVisibleTo(controls) and controls.configs()[2].kv_budget_bytes == budget


def test_a_size_the_sliders_show_exactly_has_no_note(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    controls = SearchControls()
    qtbot.addWidget(controls)
    controls.set_configs(ModelSpec(), SearchConfig(), CacheConfig(kv_budget_bytes=64_000_000))
    assert controls.kv_budget.value() == 64 and not controls.kv_budget.note.isVisibleTo(controls)
