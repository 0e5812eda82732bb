"""The early exits' thresholds given on the command line win over a calibration in `run` and in the window (the
window laid the saved ones over them, and turned a typed entropy exit off); a PRM with no logit lens refuses the
entropy exit before any calibration is compared (the advice to calibrate it could never work); a calibration that
kept an exit saved as off says so (it showed "θ 0.0000, δ 0.0000")."""

from __future__ import annotations

import pytest

from app.early_exit import Thresholds, kept_entropy_text, save_thresholds
from app.exit_options import THRESHOLDS, given_thresholds
from app.options import configs_from_args, search_parser
from engine.config import CacheConfig, ModelSpec, SearchConfig
from engine.errors import LayersUnavailable

# What `eval --verifier self-judge --calibrate` saved on a tiny run: verify-skip at its highest, the exit off.
OFF = Thresholds(1.0, 0.999, 4, 0.0, 1.0, entropy_theta=1e-6, entropy_delta=1e-6, entropy_vocab=49152,
                 entropy_layers=30, entropy_steps=4, entropy_mean_layer=30.0, entropy_agreement=1.0,
                 entropy_missed=0.0, generator="bundled", verifier="self-judge on bundled",
                 entropy_verifier="self-judge on bundled")
TYPED = ["--verify-skip", "--tau-conf", "0.3", "--r-gap", "0", "--entropy-exit", "--entropy-theta", "8",
         "--entropy-delta", "3"]


@pytest.fixture
def calibrated(tmp_path, monkeypatch) -> Thresholds:
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    save_thresholds(OFF)
    return OFF


def args_of(*argv: str):
    args = search_parser().parse_args(list(argv))
    args.argv = ["gui", *argv]
    return args


def test_run_keeps_the_typed_thresholds_over_the_calibration(calibrated):
    _, search, _ = configs_from_args(args_of("--verifier", "self-judge", *TYPED))
    assert (search.tau_conf, search.r_gap, search.entropy_theta, search.entropy_delta) == (0.3, 0.0, 8.0, 3.0)
    assert search.entropy_exit and search.verify_skip
    assert given_thresholds(args_of("--verifier", "self-judge", *TYPED)) == frozenset(THRESHOLDS)
    assert given_thresholds(args_of("--verify-skip", "--tau-conf", "0.5")) == {"tau_conf"}


def test_the_window_keeps_the_thresholds_given_on_the_command_line(qtbot, calibrated):
    from app.gui.controls import SearchControls

    controls = SearchControls()
    qtbot.addWidget(controls)
    args = args_of("--verifier", "self-judge", *TYPED)
    _, typed, _ = configs_from_args(args)
    controls.set_configs(ModelSpec(), typed, CacheConfig(), given=given_thresholds(args))
    _, built, _ = controls.configs()
    assert (built.tau_conf, built.r_gap, built.entropy_theta, built.entropy_delta) == (0.3, 0.0, 8.0, 3.0)
    assert built.entropy_exit and built.verify_skip and controls.is_valid()
    shown = controls.thresholds_label.text()
    assert "τ_conf 0.300, r_gap 0.000 (given on the command line)" in shown, shown
    assert "entropy exit θ 8.000, δ 3.000 (given on the command line)" in shown, shown
    # A session's settings, or the remembered ones, follow the calibration as before (nothing was typed for them).
    controls.set_configs(ModelSpec(), typed, CacheConfig())
    _, built, _ = controls.configs()
    assert (built.tau_conf, built.r_gap, built.entropy_exit) == (1.0, 0.999, False)


def test_the_window_lays_the_calibration_only_over_what_was_not_given(qtbot, calibrated):
    from app.gui.controls import SearchControls

    controls = SearchControls()
    qtbot.addWidget(controls)
    args = args_of("--verifier", "self-judge", "--verify-skip", "--tau-conf", "0.5", "--entropy-exit")
    _, typed, _ = configs_from_args(args)
    controls.set_configs(ModelSpec(), typed, CacheConfig(), given=given_thresholds(args))
    _, built, _ = controls.configs()
    assert (built.tau_conf, built.r_gap, built.entropy_exit) == (0.5, 0.999, False)  # as `run` decides
    assert "τ_conf 0.500, r_gap 0.999 (τ_conf given on the command line; r_gap calibrated)" in \
        controls.thresholds_label.text()


@pytest.mark.parametrize("command", ["run", "plan"])
def test_a_prm_without_a_logit_lens_refuses_the_exit_before_the_calibration_is_compared(calibrated, command):
    args = args_of("--verifier", "prm", "--verifier-model", "synthetic:tiny-qwen-prm", "--entropy-exit")
    args.argv[0] = command
    with pytest.raises(LayersUnavailable, match=r"reads a reward head on its last layer.*no logit lens to exit on"):
        configs_from_args(args)


def test_the_cli_says_the_no_lens_refusal_and_not_to_calibrate(calibrated, capsys):
    from app.cli import main

    assert main(["plan", "--model", "synthetic:tiny-llama", "--verifier", "prm", "--verifier-model",
                 "synthetic:tiny-qwen-prm", "--entropy-exit"]) == 2
    err = capsys.readouterr().err
    assert "no logit lens to exit on" in err and "Calibrate them" not in err, err


def test_a_kept_exit_saved_off_is_said_as_off_not_as_zero_thresholds():
    assert kept_entropy_text(OFF) == "the entropy exit saved as off for self-judge on bundled stays off"
    on = Thresholds(0.9, 0.1, entropy_theta=3.25, entropy_delta=0.5, verifier="logprob on bundled",
                    entropy_verifier="self-judge on bundled")  # kept by a logprob calibration
    assert kept_entropy_text(on) == "the saved θ 3.250, δ 0.500 measured on self-judge on bundled are kept"


def test_search_config_defaults_are_not_given():
    assert given_thresholds(args_of()) == frozenset() and SearchConfig().tau_conf == 0.9


def test_the_window_opens_and_says_the_no_lens_refusal_itself(calibrated):
    """`gui` is not refused up front: its settings say it in red by the exit's checkbox, as for such a PRM picked
    there; the calibration of another verifier is not compared either."""
    from app.cli import build_parser

    args = build_parser().parse_args(["gui", "--verifier", "prm", "--verifier-model", "synthetic:tiny-qwen-prm",
                                      "--entropy-exit"])
    _, search, _ = configs_from_args(args)
    assert search.entropy_exit
