"""Calibrating the layer-entropy exit: percentile thresholds replayed on recorded verifier passes."""

from __future__ import annotations

import json
import math

import pytest

from app.calibrate_exit import calibrate_exit, exit_layer
from app.early_exit import (
    Thresholds,
    calibrated_on,
    entropy_mismatch,
    keep_entropy_of,
    load_thresholds,
    save_thresholds,
    thresholds_text,
)
from engine.config import CacheConfig, SearchConfig
from engine.search import run
from engine.verifiers.entropy_exit import REFERENCE_VOCAB, ExitRule

QUESTION = "Tom has 3 apples and buys 4 more. How many?"


def synthetic_pass(settles_at: int, layers: int = 8, early_agrees: bool = True):
    """A synthetic verifier's recorded pass over two candidates: the lens is unsure (entropy 10) and ranks them
    the wrong way round before layer `settles_at`, then sure (0.5) and, if `early_agrees`, as the last layer."""
    entropies = [[10.0, 10.0] if layer < settles_at else [0.5, 0.5] for layer in range(1, layers)]
    final = [0.9, 0.2]
    scores = [[0.1, 0.8] if layer < settles_at or not early_agrees else [0.8, 0.3] for layer in range(1, layers)]
    return (50_000, entropies, [*scores, final])


def test_the_replayed_rule_is_the_exits_own():
    entropies = [[9.0, 9.0], [1.0, 1.0], [1.2, 0.9], [1.1, 1.0]]
    assert exit_layer(entropies, theta=2.0, delta=0.5) == 3  # layer 2 moved by 8
    assert exit_layer(entropies, theta=2.0, delta=8.5) == 2
    assert exit_layer(entropies, theta=0.5, delta=8.5) is None
    assert exit_layer(entropies, theta=2.0, delta=0.5, first_layer=4) == 4


def test_calibration_exits_where_the_lens_settled_and_agrees():
    steps = [[synthetic_pass(4)], [synthetic_pass(4), synthetic_pass(4)]]
    fit = calibrate_exit(steps, target=0.9)
    assert fit.mean_layer == 5  # layer 4 still moved by 9.5; layer 5 is settled
    assert (fit.exit_rate, fit.agreement, fit.layers, fit.steps) == (1.0, 1.0, 8, 2)
    assert fit.theta_nats == 10.0  # the 75th percentile of the entropies: the lowest that lets 0.5 through
    scale = math.log(50_000) / math.log(REFERENCE_VOCAB)
    assert fit.theta == pytest.approx(fit.theta_nats / scale) and fit.delta == pytest.approx(fit.delta_nats / scale)
    assert ExitRule(fit.theta, fit.delta).for_vocab(50_000) == pytest.approx((fit.theta_nats, fit.delta_nats))


def test_a_lens_that_settles_on_the_wrong_choice_keeps_every_layer():
    fit = calibrate_exit([[synthetic_pass(3, early_agrees=False)]] * 3, target=0.9)
    assert (fit.exit_rate, fit.mean_layer) == (0.0, 8)  # no pair that exits keeps the full pass's choice
    loose = calibrate_exit([[synthetic_pass(3, early_agrees=False)]] * 3, target=0.0)
    assert loose.exit_rate == 1.0 and loose.agreement == 0.0 and loose.mean_layer == 4


def test_nothing_recorded_is_a_clear_error():
    with pytest.raises(ValueError, match="recorded no verifier layers"):
        calibrate_exit([(), ()])


def _steps(loaded, **changes) -> list:
    config = SearchConfig(beams=2, width=2, step_tokens=4, step_delimiter=None, max_steps=2, verifier="self-judge",
                          **changes)
    events = list(run(QUESTION, loaded, config, CacheConfig()))
    assert events[-1].type == "run_finished", events[-1]
    return [e for e in events if e.type == "step_selected"]


def test_recording_changes_nothing_and_the_exit_fires_where_the_replay_says(tiny_qwen2):
    """The recorded passes of a real verifier (self-judge on the 6-layer tiny Qwen2), replayed with calibrated
    thresholds, give the exit layers the exit itself then takes (step 1: the same candidates in both runs)."""
    plain, recorded = _steps(tiny_qwen2), _steps(tiny_qwen2, calibrate_exit=True)
    assert [(s.kept, s.pruned) for s in recorded] == [(s.kept, s.pruned) for s in plain]
    assert all(s.exit_layer == 6 and s.lens_trace for s in recorded)
    passes = recorded[0].lens_trace
    assert all(len(entropies) == 5 and len(scores) == 6 for _, entropies, scores in passes)
    fit = calibrate_exit([s.lens_trace for s in recorded], target=0.0)  # the earliest exit the grid has
    assert fit.mean_layer < 6
    exiting = _steps(tiny_qwen2, entropy_exit=True, entropy_theta=fit.theta, entropy_delta=fit.delta)
    theta, delta = ExitRule(fit.theta, fit.delta).for_vocab(fit.vocab)
    layers = [exit_layer(e, theta, delta) or 6 for _, e, s in passes for _ in s[-1]]
    assert exiting[0].exit_layer == pytest.approx(sum(layers) / len(layers))


def test_the_file_keeps_the_entropy_thresholds_and_the_window_shows_them(tmp_path):
    path = tmp_path / "early_exit.json"
    saved = Thresholds(0.8, 0.2, 10, 0.3, 0.95, entropy_theta=3.5, entropy_delta=0.7, entropy_vocab=49152,
                       entropy_layers=30, entropy_steps=12, entropy_mean_layer=21.5, entropy_agreement=0.92)
    save_thresholds(saved, path)
    assert load_thresholds(path) == saved
    text = thresholds_text(saved, SearchConfig())
    assert "entropy exit θ 3.500, δ 0.700" in text and "layer 21.5" in text and "30-layer" in text
    assert "the paper's; not calibrated" in thresholds_text(None, SearchConfig())
    with pytest.raises(ValueError, match="must both be positive"):
        Thresholds(0.8, 0.2, entropy_theta=3.5)


# A PRM with a logit lens: a calibration saves entropy thresholds for no other kind (Qwen2.5-Math-PRM refuses the exit).
PRM_FIT = Thresholds(0.8, 0.2, 10, 0.3, 0.95, entropy_theta=3.5, entropy_delta=0.7, entropy_vocab=32_000,
                     entropy_layers=4, entropy_steps=12, entropy_mean_layer=3.0, entropy_agreement=0.9,
                     generator="synthetic:tiny-llama", verifier="prm synthetic:tiny-math-shepherd")
TINY_RUN = ["run", "What is 2+3?", "--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2",
            "--step-tokens", "4", "--max-steps", "1", "--no-save"]


def _configs(*argv: str) -> SearchConfig:
    from app.cli import build_parser
    from app.options import configs_from_args

    return configs_from_args(build_parser().parse_args(list(argv)))[1]


def test_calibration_records_its_verifier_and_generator(tmp_path, monkeypatch, capsys):
    from app.cli import main

    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"question": "What is 2+3?", "answer": "5"}\n', encoding="utf-8")
    assert main(["eval", str(problems), "--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2",
                 "--step-tokens", "3", "--max-steps", "2", "--verifier", "self-judge", "--calibrate",
                 "--no-save"]) == 0
    saved = load_thresholds()
    assert (saved.generator, saved.verifier) == ("synthetic:tiny-llama", "self-judge on synthetic:tiny-llama")
    assert "calibrated on verifier self-judge on synthetic:tiny-llama, generator synthetic:tiny-llama" in \
        capsys.readouterr().out
    search = _configs("run", "--model", "synthetic:tiny-llama", "--verifier", "self-judge", "--entropy-exit")
    assert (search.entropy_theta, search.entropy_delta) == (saved.entropy_theta, saved.entropy_delta)
    assert "entropy exit: calibrated θ" in capsys.readouterr().err  # the run says which thresholds it took


def test_a_run_refuses_entropy_thresholds_calibrated_on_another_verifier(tmp_path, monkeypatch, capsys):
    from app.cli import main

    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    save_thresholds(PRM_FIT)
    assert main([*TINY_RUN, "--verifier", "self-judge", "--entropy-exit"]) == 2
    err = capsys.readouterr().err
    assert "were measured on prm synthetic:tiny-math-shepherd, not on this search's self-judge on " \
           "synthetic:tiny-llama" in err and "beamwise eval PROBLEMS --calibrate" in err and "--entropy-theta" in err
    given = _configs(*TINY_RUN, "--verifier", "self-judge", "--entropy-exit", "--entropy-theta", "9",
                     "--entropy-delta", "1")
    assert (given.entropy_theta, given.entropy_delta) == (9.0, 1.0)  # the user's own thresholds: no question
    same = _configs(*TINY_RUN, "--verifier", "prm", "--verifier-model", "synthetic:tiny-math-shepherd",
                    "--entropy-exit")
    assert (same.entropy_theta, same.entropy_delta) == (3.5, 0.7)
    assert "(verifier prm synthetic:tiny-math-shepherd, generator synthetic:tiny-llama)" in capsys.readouterr().err
    _configs(*TINY_RUN, "--verifier", "self-judge")  # the exit is off: nothing to refuse


def test_a_calibration_without_a_lens_keeps_the_entropy_thresholds_and_their_verifier():
    """A logprob --calibrate wrote "entropy_theta": null over a PRM's calibrated entropy exit, and said nothing."""
    logprob = Thresholds(0.7, 0.1, 20, 0.4, 0.95, generator="synthetic:tiny-llama",
                         verifier="logprob on synthetic:tiny-llama")
    kept = keep_entropy_of(logprob, PRM_FIT)
    assert (kept.tau_conf, kept.r_gap, kept.verifier) == (0.7, 0.1, "logprob on synthetic:tiny-llama")
    assert (kept.entropy_theta, kept.entropy_delta, kept.entropy_layers) == (3.5, 0.7, 4)
    assert kept.entropy_verifier == "prm synthetic:tiny-math-shepherd"
    assert entropy_mismatch(kept, "prm synthetic:tiny-math-shepherd") is None  # still the PRM's to use
    assert "measured on prm synthetic:tiny-math-shepherd" in entropy_mismatch(kept, "logprob on synthetic:tiny-llama")
    assert calibrated_on(kept).endswith("; entropy exit on prm synthetic:tiny-math-shepherd")
    assert keep_entropy_of(logprob, None) == logprob


def test_a_file_from_before_the_verifier_was_recorded_still_loads_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    old = {"tau_conf": 0.8, "r_gap": 0.2, "steps": 10, "skip_rate": 0.3, "agreement": 0.95, "entropy_theta": 3.5,
           "entropy_delta": 0.7, "entropy_vocab": 49152, "entropy_layers": 30, "entropy_steps": 12}
    (tmp_path / "early_exit.json").write_text(json.dumps(old), encoding="utf-8")
    saved = load_thresholds()
    assert saved is not None and (saved.verifier, saved.generator) == (None, None)
    assert "verifier not recorded" in thresholds_text(saved, SearchConfig(), "self-judge on synthetic:tiny-llama")
    search = _configs(*TINY_RUN, "--verifier", "self-judge", "--entropy-exit")
    assert (search.entropy_theta, search.entropy_delta) == (3.5, 0.7)
    assert "(verifier not recorded: calibrate again to record it)" in capsys.readouterr().err


def test_the_window_names_the_calibrations_verifier_and_sets_aside_another_ones(qtbot, tmp_path, monkeypatch):
    pytest.importorskip("PySide6")
    from app.gui.controls import SearchControls
    from engine.config import ModelSpec

    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    save_thresholds(PRM_FIT)
    controls = SearchControls()
    qtbot.addWidget(controls)
    tiny = ModelSpec("synthetic:tiny-llama")
    controls.set_configs(tiny, SearchConfig(verifier="prm", verifier_model="synthetic:tiny-math-shepherd",
                                            entropy_exit=True), CacheConfig())
    text = controls.thresholds_label.text()
    assert "verifier prm synthetic:tiny-math-shepherd, generator synthetic:tiny-llama" in text
    assert "entropy exit θ 3.500, δ 0.700 (calibrated on 12 steps" in text
    assert (controls.configs()[1].entropy_theta, controls.configs()[1].entropy_delta) == (3.5, 0.7)
    controls.set_configs(tiny, SearchConfig(verifier="self-judge", entropy_exit=True), CacheConfig())
    paper = SearchConfig()
    assert f"entropy exit θ {paper.entropy_theta:.3f}, δ {paper.entropy_delta:.3f} (the paper's: the calibrated " \
           "entropy exit thresholds" in controls.thresholds_label.text()
    assert "not on this search's self-judge on synthetic:tiny-llama" in controls.thresholds_label.text()
    built = controls.configs()[1]
    assert (built.entropy_theta, built.entropy_delta, built.tau_conf) == (paper.entropy_theta, paper.entropy_delta,
                                                                          0.8)
