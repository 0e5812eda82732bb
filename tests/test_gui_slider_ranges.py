"""The settings panel takes every value `beamwise run` takes: a slider's range grows to hold a larger one, and one
it still cannot show is run as set and written under it (`gui --max-steps 200` ran 64 steps on a 1-64 slider)."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("pytestqt")

from app.cli import build_parser
from app.gui import launch
from app.gui.controls import SearchControls
from app.gui.slider_spin import QT_INT_MAX, SliderSpin
from app.options import configs_from_args
from benchmarks.fake_search import fake_run
from engine.config import CacheConfig, ModelSpec, SearchConfig

BIG = ["--model", "synthetic:tiny-llama", "--max-steps", "200", "--beams", "300", "--width", "3",
       "--max-candidates", "2000", "--step-tokens", "4096", "--temperature", "2.5", "--top-p", "0.955",
       "--pcie-gbps", "0.5", "--prefill-chunk", "100000", "--verifier", "self-judge", "--verifier-kv-share", "0.001",
       "--speculative", "--speculative-continuations", "100", "--kv-budget", "20GB"]
SEARCH_FIELDS = ("beams", "width", "max_candidates", "step_tokens", "max_steps", "temperature", "top_p")
CACHE_FIELDS = ("pcie_gbps", "prefill_chunk", "verifier_kv_share", "speculative", "speculative_continuations",
                "kv_budget_bytes")


@pytest.fixture(autouse=True)
def _no_calibration(tmp_path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))  # no saved verify-skip thresholds


def fields(config: object, names: tuple[str, ...]) -> dict:
    return {name: getattr(config, name) for name in names}


def test_gui_options_past_the_sliders_ends_are_the_settings_run_would_use(keep_window, qsettings):
    """`gui --max-steps 200 --beams 300` showed "Max steps 64" and ran beams 64, max_steps 64 ("step 3/64")."""
    args = build_parser().parse_args(["gui", *BIG])
    _, run_search, run_cache = configs_from_args(args)  # what `beamwise run` takes from the same options
    window = keep_window(launch._build_window(args, qsettings, None, interactive=False))
    _, search, cache = window.controls.configs()
    assert fields(search, SEARCH_FIELDS) == fields(run_search, SEARCH_FIELDS) == {
        "beams": 300, "width": 3, "max_candidates": 2000, "step_tokens": 4096, "max_steps": 200, "temperature": 2.5,
        "top_p": 0.955}
    assert fields(cache, CACHE_FIELDS) == fields(run_cache, CACHE_FIELDS)
    assert (cache.pcie_gbps, cache.prefill_chunk, cache.verifier_kv_share, cache.speculative_continuations) == (
        0.5, 100_000, 0.001, 100)
    controls = window.controls
    assert (controls.max_steps.value(), controls.beams.value(), controls.step_tokens.value()) == (200, 300, 4096)
    assert controls.max_steps.slider.value() == 200 and controls.temperature.slider.value() == 250  # grown with it
    assert not controls.max_steps.note.isVisibleTo(controls)  # shown as it is: nothing to say under it
    for control, said in ((controls.top_p, "0.955"), (controls.pcie_gbps, "0.5 GB/s"),
                          (controls.verifier_share, "0.1 %")):  # what the control cannot show is said under it
        assert control.note.isVisibleTo(controls) and f"set to {said};" in control.note.text(), control.note.text()
    assert controls.verifier_share.value() == 1  # a share of 0.1 % is not "auto"
    assert controls.is_valid(), controls.error_text()
    window.controls.max_steps.set_value(12)  # moved: the control's own value from then on
    assert window.controls.configs()[1].max_steps == 12


def test_run_again_of_a_session_with_large_settings_keeps_them(make_window, tmp_path):
    from app.recorder import SessionRecorder
    from app.store import SessionStore

    search = SearchConfig(beams=300, width=3, max_candidates=2000, max_steps=200, step_tokens=4096, temperature=3.0,
                          top_p=0.333, verifier="self-judge")
    cache = CacheConfig(pcie_gbps=250.5, prefill_chunk=65_000, verifier_kv_share=0.95, speculative=True,
                        speculative_continuations=200)
    store = SessionStore(tmp_path / "s.db")
    recorder = SessionRecorder(store)
    for event in fake_run("How fast is the train?", search, cache, finish_at_step=1):
        recorder.write(event)
    window = make_window(store=store, store_factory=lambda: SessionStore(tmp_path / "s.db"))
    window.controls.set_configs(ModelSpec(source="synthetic:fake"), SearchConfig(), CacheConfig())
    window.sessions.run_again_requested.emit(recorder.session_id)
    _, again, again_cache = window.controls.configs()
    assert fields(again, SEARCH_FIELDS) == fields(search, SEARCH_FIELDS)
    assert fields(again_cache, CACHE_FIELDS) == fields(cache, CACHE_FIELDS)
    assert window.controls.verifier_share.value() == 95 and window.controls.continuations.value() == 200


def test_a_value_past_what_a_control_can_count_is_run_as_set_and_said(qtbot):
    """A spin box counts in 32 bits: --max-steps 10**12 is shown at the end, said under it, and run as given."""
    controls = SearchControls()
    qtbot.addWidget(controls)
    controls.set_configs(ModelSpec(), SearchConfig(beams=1, width=1, max_steps=10**12),
                         CacheConfig(speculative_continuations=5 * 10**9))
    assert controls.max_steps.value() == QT_INT_MAX
    assert controls.max_steps.note.isVisibleTo(controls) and "1,000,000,000,000" in controls.max_steps.note.text()
    _, search, cache = controls.configs()
    assert (search.max_steps, cache.speculative_continuations) == (10**12, 5 * 10**9)


def test_a_slider_grows_to_a_larger_value_and_clamps_only_below_its_start(qtbot):
    control = SliderSpin(1, 64)
    qtbot.addWidget(control)
    with qtbot.waitSignal(control.value_changed) as changed:
        control.set_value(200)
    assert changed.args == [200.0] and control.value() == 200
    assert (control.spin.maximum(), control.slider.maximum()) == (200, 200)
    control.set_value(0)  # below the start: clamped (no config takes fewer than the start here)
    assert control.value() == 1
    fine = SliderSpin(0, 2, decimals=2, step=0.05)
    qtbot.addWidget(fine)
    assert fine.nearest(7.257) == 7.26 and fine.spin.maximum() == 2  # `nearest` says, it does not grow
    fine.show_number(7.257)
    assert (fine.value(), fine.number(), fine.slider.maximum()) == (7.26, 7.257, 726)
    fine.slider.setValue(100)  # the user moves it: its own value
    assert fine.number() == 1.0 and not fine.note.isVisibleTo(fine)


def test_settings_the_window_saved_come_back_whole(qtbot, qsettings):
    """The window remembers its settings on close and shows them at the next start (saved.load_configs)."""
    from app.gui import settings as saved

    search = dataclasses.replace(SearchConfig(), max_steps=100, step_tokens=1000, beams=80)
    saved.save_configs(qsettings, ModelSpec(), search, CacheConfig(prefill_chunk=40_000))
    controls = SearchControls()
    qtbot.addWidget(controls)
    controls.set_configs(*saved.load_configs(qsettings))
    _, back, cache = controls.configs()
    assert (back.max_steps, back.step_tokens, back.beams, cache.prefill_chunk) == (100, 1000, 80, 40_000)
