"""An entropy exit calibration that missed its target turns the exit off: saved as such, honoured by `run`, said.

It saved theta = delta = 1e-06 "under which the exit does not fire", but the rule is a strict `<` on entropies that
reach 0.0 exactly (a bf16 one-hot lens): a lens saturated at two neighbouring layers met it, and `run --entropy-exit`
exited on exactly the verifier whose calibration said its early layers mislead.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from app import eval_runs
from app.calibrate_exit import NEVER, calibrate_exit, exit_layer
from app.cli import build_parser, main
from app.early_exit import Thresholds, load_thresholds, save_thresholds, thresholds_path, thresholds_text
from app.options import configs_from_args
from engine.config import SearchConfig
from engine.verifiers.entropy_exit import EntropyExit, ExitRule, exit_rule

VERIFIER = "self-judge on synthetic:tiny-llama"
RUN = ["run", "What is 2+3?", "--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4",
       "--max-steps", "1", "--no-save", "--verifier", "self-judge", "--entropy-exit"]
OFF_SAID = "beamwise: entropy exit: off (verifier self-judge on synthetic:tiny-llama"


def misleading_pass(layers: int = 20):
    """Sure and steady at layer 2 with the wrong candidate first, unsure and moving after: every pair misleads."""
    entropies = [[0.2, 0.2], [0.1, 0.1], *([9 - 0.4 * i] * 2 for i in range(layers - 3))]
    scores = [[0.1, 0.8]] * (layers - 1) + [[0.9, 0.2]]
    return (50_000, entropies, scores)


def _missed_calibration() -> Thresholds:
    """What `beamwise eval --calibrate` saves when no threshold pair reaches 90% agreement."""
    found = Thresholds(0.9, 0.1, 4, generator="synthetic:tiny-llama", verifier=VERIFIER)
    return eval_runs.Evaluation._with_entropy_exit(SimpleNamespace(lens_steps=[[misleading_pass()]] * 4), found, 0.9)


def _search(*argv: str) -> SearchConfig:
    return configs_from_args(build_parser().parse_args(list(argv)))[1]


def test_the_fallback_is_saved_as_the_exit_off(tmp_path, capsys):
    fit = calibrate_exit([[misleading_pass()]] * 4, target=0.9)
    assert fit.off and fit.missed == 0.0 and (fit.exit_rate, fit.mean_layer) == (0.0, 20)
    saved = _missed_calibration()
    assert "saved the exit as off for this verifier" in capsys.readouterr().out
    assert saved.entropy_off and saved.entropy_missed == 0.0
    assert (saved.entropy_theta, saved.entropy_delta) == (NEVER, NEVER)  # positive, as older readers expect
    path = save_thresholds(saved, tmp_path / "early_exit.json")
    assert json.loads(path.read_text())["entropy_missed"] == 0.0
    assert load_thresholds(path) == saved
    met = calibrate_exit([[misleading_pass()]] * 4, target=0.0)
    assert not met.off  # a target met: thresholds, not the exit off


def test_thresholds_alone_cannot_say_off_a_saturated_lens_meets_them():
    """The engine's own rule with the fallback's thresholds: a one-hot lens (entropy 0.0) settles and exits."""
    theta, delta = ExitRule(NEVER, NEVER).for_vocab(50_000)
    exit_ = SimpleNamespace(theta=theta, delta=delta)
    zero = torch.zeros(2)
    assert EntropyExit._settled(exit_, zero, zero)  # the bug: the 1e-06 "never" fires
    assert exit_layer([[0.0, 0.0]] * 5, theta, delta) == 2


def test_run_with_the_missed_calibration_runs_every_layer_and_says_why(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    save_thresholds(_missed_calibration())
    capsys.readouterr()
    search = _search(*RUN)
    assert not search.entropy_exit and exit_rule(search) is None  # no rule attached: a lens at 0.0 cannot exit
    err = capsys.readouterr().err
    assert err.count("entropy exit") == 1 and err.startswith(OFF_SAID), err
    assert "no thresholds that reached the target agreement (the strictest agreed on 0%" in err
    assert "--target-agreement" in err and "--entropy-theta and --entropy-delta" in err
    given = _search(*RUN, "--entropy-theta", "9", "--entropy-delta", "1")  # the user's own thresholds still win
    assert given.entropy_exit and (given.entropy_theta, given.entropy_delta) == (9.0, 1.0)
    assert "entropy exit: off" not in capsys.readouterr().err
    assert main(RUN) == 0  # the whole run, with the exit off
    assert capsys.readouterr().err.count(OFF_SAID) == 1


def test_another_verifiers_missed_calibration_is_still_refused(tmp_path, monkeypatch, capsys):
    from dataclasses import replace

    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    prm = "prm synthetic:tiny-qwen-prm"
    save_thresholds(replace(_missed_calibration(), verifier=prm, entropy_verifier=prm))
    assert main(RUN) == 2
    assert "were measured on prm synthetic:tiny-qwen-prm" in capsys.readouterr().err


def test_the_window_says_the_exit_is_off(tmp_path, capsys):
    text = thresholds_text(_missed_calibration(), SearchConfig(), VERIFIER)
    assert "\nentropy exit off for this verifier: its calibration on 4 steps found no thresholds" in text
    assert "1e-06" not in text and "--target-agreement" in text


def test_an_old_fallback_file_still_loads_and_runs_as_before(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    old = {"tau_conf": 0.9, "r_gap": 0.1, "steps": 4, "entropy_theta": 1e-06, "entropy_delta": 1e-06,
           "entropy_vocab": 50_000, "entropy_layers": 20, "entropy_steps": 4, "entropy_mean_layer": 20.0,
           "entropy_agreement": 1.0, "generator": "synthetic:tiny-llama", "verifier": VERIFIER}
    thresholds_path().write_text(json.dumps(old), encoding="utf-8")
    assert not load_thresholds().entropy_off
    search = _search(*RUN)
    assert search.entropy_exit and (search.entropy_theta, search.entropy_delta) == (1e-06, 1e-06)
    assert "entropy exit: calibrated θ 1e-06, δ 1e-06" in capsys.readouterr().err


def test_a_missed_share_needs_thresholds_beside_it():
    with pytest.raises(ValueError, match="entropy_missed"):
        Thresholds(0.9, 0.1, entropy_missed=0.4)


def test_the_windows_run_has_the_exit_off_too(qtbot, tmp_path, monkeypatch):
    """The window's text said the exit was off while its run used the saved 1e-06 thresholds with the exit on."""
    pytest.importorskip("PySide6")
    from app.gui.controls import SearchControls

    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    save_thresholds(_missed_calibration())
    controls = SearchControls()
    qtbot.addWidget(controls)
    controls.set_configs(*configs_from_args(build_parser().parse_args(RUN[:-1])))
    controls.entropy_exit.setChecked(True)
    search = controls.configs()[1]
    assert not search.entropy_exit and exit_rule(search) is None
    assert "entropy exit off for this verifier" in controls.thresholds_label.text()
