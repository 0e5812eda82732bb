"""A damaged thresholds file (early_exit.json) in the window: said over the exit's thresholds while an exit that
reads it is on (the window ran on the defaults and called them "not calibrated"), and `beamwise gui --verify-skip`
warns about it on stderr once (the options were turned into configs twice, so it came twice)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.gui.controls import SearchControls
from engine.config import CacheConfig, ModelSpec, SearchConfig

DAMAGED = ["garbage", json.dumps({"tau_conf": "x", "r_gap": 0.1})]


@pytest.fixture
def config_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("text", DAMAGED)
@pytest.mark.parametrize("exit_on", ["verify_skip", "entropy_exit"])
def test_the_exit_controls_say_a_damaged_thresholds_file_while_an_exit_reads_it(qtbot, config_dir, text, exit_on):
    (config_dir / "early_exit.json").write_text(text, encoding="utf-8")
    controls = SearchControls()
    qtbot.addWidget(controls)
    controls.set_configs(ModelSpec(), SearchConfig(verifier="self-judge"), CacheConfig())
    assert "damaged" not in controls.thresholds_label.text()  # no exit on: nothing reads the file
    getattr(controls, exit_on).setChecked(True)
    shown = controls.thresholds_label.text()
    assert shown.startswith(f"⚠ {config_dir / 'early_exit.json'}, the calibrated thresholds, is damaged (")
    assert "Using the default thresholds meanwhile." in shown and "τ_conf 0.900, r_gap 0.100" in shown
    assert controls.is_valid() and controls.configs()[1].tau_conf == SearchConfig().tau_conf
    (config_dir / "early_exit.json").unlink()  # gone: the next change says nothing of it
    getattr(controls, exit_on).setChecked(False)
    getattr(controls, exit_on).setChecked(True)
    assert "damaged" not in controls.thresholds_label.text()


def test_gui_warns_once_about_a_damaged_thresholds_file(qtbot, tmp_path, config_dir, capsys, monkeypatch,
                                                        qsettings):
    from app.gui import launch
    from app.gui import settings as saved
    from tests.test_gui_window import gui_args

    (config_dir / "early_exit.json").write_text("garbage", encoding="utf-8")
    built = []
    build = launch._build_window

    class Built(Exception):
        pass

    def build_and_stop(*args, **kwargs):
        window = build(*args, **kwargs)
        qtbot.addWidget(window)
        built.append(window)
        raise Built  # the window is there, its settings shown: nothing more is needed

    monkeypatch.setattr(launch, "_build_window", build_and_stop)
    monkeypatch.setattr(saved, "default_settings", lambda: qsettings)  # never the user's settings
    with pytest.raises(Built):
        launch.main(gui_args(tmp_path, "--model", "synthetic:tiny-llama", "--verify-skip"))
    if built[0].store is not None:
        built[0].store.close()
    assert capsys.readouterr().err.count("is damaged") == 1
    assert built[0].controls.configs()[1].verify_skip
    assert built[0].controls.thresholds_label.text().startswith("⚠ ")
