"""`eval --calibrate` says what it found in true words: why an entropy exit was not calibrated, what a verify-skip
fallback missed (the window in the same words), thresholds refused in calibration's terms, singular steps."""

from __future__ import annotations

import json

import pytest

from app.calibrate import StepStat, calibrate
from app.cli import main
from app.early_exit import Thresholds, load_thresholds, save_thresholds, skip_text, thresholds_text
from engine.config import SearchConfig
from tests.test_eval_cli import TINY, write

OPT = ["--model", "synthetic:tiny-opt", "--verifier", "self-judge", "--beams", "2", "--width", "2", "--step-tokens",
       "3", "--max-steps", "2"]
# 8 steps; the most confident ones disagree, so the pairs that skip steps agree on at most 1 of 3 (37.5% at 33%)
MISSED = [StepStat(0.9, 0.5, False), StepStat(0.85, 0.45, False), StepStat(0.8, 0.4, True),
          StepStat(0.7, 0.3, False), StepStat(0.3, 0.05, True), StepStat(0.2, 0.04, True),
          StepStat(0.25, 0.03, True), StepStat(0.1, 0.02, True)]


def problems(tmp_path):
    return write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')


def test_a_self_judge_calibration_on_a_model_that_cannot_run_layer_by_layer_says_so(tmp_path, capsys, monkeypatch):
    """It said "the verifier has no logit lens: use --verifier self-judge ...", the verifier it ran with."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    assert main(["eval", str(problems(tmp_path)), *OPT, "--no-save", "--calibrate"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("entropy exit:")]
    assert "(OPTModel) cannot run layer by layer" in line and "Llama-, Mistral- and Qwen2-style" in line, line
    assert "logit lens" not in line
    assert load_thresholds().entropy_theta is None  # verify-skip's are saved all the same


def test_the_entropy_exit_on_such_a_model_is_refused_before_the_first_problem_and_run_names_the_cure(
        tmp_path, capsys, monkeypatch):
    """Every run failed in turn, each saying "or with the self-judge ... verifier", the one in use."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    assert main(["eval", str(problems(tmp_path)), *OPT, "--no-save", "--entropy-exit"]) == 2
    captured = capsys.readouterr()
    assert "[eval]" not in captured.err and "problems" not in captured.out
    error = captured.err.strip().splitlines()[-1]
    assert "(OPTModel) cannot run layer by layer" in error and "Qwen2-shaped generator" in error, error
    assert "or with the self-judge" not in error
    assert main(["run", "What is 2+3?", *OPT, "--no-save", "--entropy-exit"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == error  # `run` fails in the same words


@pytest.mark.parametrize(("given", "said"), [
    (["--tau-conf", "0.5"], "so --tau-conf cannot be given while calibrating: leave it out"),
    (["--tau-conf", "0.5", "--verify-skip"], "so --verify-skip would do nothing: leave it out (and any thresholds"),
    (["--entropy-theta", "3"], "so --entropy-theta cannot be given while calibrating: leave it out"),
    (["--entropy-theta", "3", "--entropy-exit"], "so --entropy-exit would do nothing: leave it out (and any"),
])  # fmt: skip
def test_thresholds_beside_calibrate_are_refused_in_calibrations_words(tmp_path, capsys, given, said):
    """It said "add --verify-skip", and with it "--calibrate ... so --verify-skip would do nothing": each refusal's
    advice refused by the next. Now neither says to add anything."""
    assert main(["eval", str(problems(tmp_path)), *TINY, "--no-save", "--calibrate", *given]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "add --" not in err[0], err


def test_a_fallback_says_what_the_closest_pair_missed_and_no_agreement_of_nothing(tmp_path, monkeypatch):
    """Eval said "no threshold pair skipped any of 8 steps" where a pair skipped 37.5% at 33%; the window said
    "skips 0%, verifier agrees 100%" of the same file, and the file stored "agreement": 1.0."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    found = calibrate(MISSED, target=0.9)
    assert (found.tau_conf, found.r_gap, found.skip_rate, found.agreement) == (1.0, 0.999, 0.0, None)
    said = ("no threshold pair reached 90% agreement on 8 steps, the closest skipping 38% of them at 33% agreement: "
            "the verifier scores every step")
    assert skip_text(found) == said
    saved = json.loads(save_thresholds(found).read_text(encoding="utf-8"))
    assert saved["agreement"] is None and saved["missed_skip_rate"] == 0.375
    shown = thresholds_text(load_thresholds(), SearchConfig())
    assert said in shown and "agrees" not in shown, shown


def test_a_file_saved_before_says_no_agreement_where_it_skips_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    old = {"tau_conf": 1.0, "r_gap": 0.999, "steps": 1, "skip_rate": 0.0, "agreement": 1.0}
    (tmp_path / "early_exit.json").write_text(json.dumps(old), encoding="utf-8")
    shown = thresholds_text(load_thresholds(), SearchConfig())
    assert "no threshold pair reached the target agreement on 1 step: the verifier scores every step" in shown
    assert "agrees" not in shown
    kept = Thresholds(0.8, 0.2, 12, 0.25, 0.95)
    assert skip_text(kept) == "skips 25% of 12 steps, verifier agrees on 95%"


def test_a_calibration_table_shows_no_exit_rows_and_one_step_is_singular(tmp_path, capsys, monkeypatch):
    """A calibration runs every layer with no exit, yet the table showed "entropy exit: verifier work saved 0.0%";
    its warning said "thresholds from 1 steps"."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    one = [*TINY[:-1], "1", "--verifier", "self-judge"]  # --max-steps 1: one step
    assert main(["eval", str(problems(tmp_path)), *one, "--no-save", "--calibrate"]) == 0
    out, err = capsys.readouterr()
    assert "entropy exit:" not in out.split("verify-skip thresholds")[0], out  # the table's rows
    assert "thresholds from 1 step are a rough guess" in err
    assert "calibrated on 1 step of a" in thresholds_text(load_thresholds(), SearchConfig(),
                                                          "self-judge on synthetic:tiny-llama")


@pytest.mark.parametrize(("given", "said"), [
    (["run", "q", "--verify-skip", "--tau-conf", "0"], "--tau-conf must be in (0, 1] (got 0.0)."),
    (["run", "q", "--verify-skip", "--r-gap", "1"], "--r-gap must be in [0, 1) (got 1.0)."),
    (["run", "q", "--entropy-exit", "--verifier", "self-judge", "--entropy-delta", "0"],
     "--entropy-delta must be a positive number (got 0.0)."),
    (["eval", "P", "--lookahead", "17"], "--lookahead must be 0..16 greedy steps (got 17)."),
    (["eval", "P", "--method", "dvts", "--lookahead", "1"],
     "--lookahead works with the beam method only, not --method dvts: pick --method beam"),
])
def test_range_errors_name_the_options_typed(tmp_path, capsys, given, said):
    """They said "tau_conf must be in (0, 1]", "the entropy exit's theta and delta", "set lookahead to 0 for dvts":
    names of fields, not of the options typed."""
    command = [str(problems(tmp_path)) if word == "P" else word for word in given]
    assert main([*command, "--no-save"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
