"""`beamwise eval` as a new user met it: calibration fallbacks, options it dropped, Ctrl+C, failed runs, a damaged
thresholds file, which verifier the entropy exit names."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from app import eval_runs
from app.calibrate_exit import NEVER, calibrate_exit
from app.cli import build_parser, main
from app.early_exit import Thresholds, load_thresholds, save_thresholds, thresholds_path
from app.eval_exit import ExitTally
from app.eval_report import ProblemResult, summarize, table
from app.options import configs_from_args
from engine.config import SearchConfig
from engine.kv.split import share_too_small, split_budget
from engine.verifiers.entropy_exit import ExitRule

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "3", "--max-steps", "2"]
SAVED = Thresholds(0.8, 0.2, 10, 0.3, 0.95, entropy_theta=3.5, entropy_delta=0.7, generator="synthetic:tiny-llama",
                   verifier="self-judge on synthetic:tiny-llama")


def write(tmp_path, *lines):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def misleading_pass(layers: int = 20):
    """A pass whose lens is sure and steady at layer 2 (entropy 0.1 after 0.2) with the wrong candidate first, then
    unsure and moving (9, 8.6, 8.2, ...): every percentile pair exits at layer 2 and disagrees with the full pass."""
    entropies = [[0.2, 0.2], [0.1, 0.1], *([9 - 0.4 * i] * 2 for i in range(layers - 3))]  # every layer but the last
    scores = [[0.1, 0.8]] * (layers - 1) + [[0.9, 0.2]]
    return (50_000, entropies, scores)


def test_an_exit_calibration_that_misses_the_target_saves_thresholds_that_never_exit():
    """It saved the strictest pair whatever its agreement ("full pass agrees on 0%"), and run then used it."""
    fit = calibrate_exit([[misleading_pass()]] * 4, target=0.9)
    assert fit.missed == 0.0  # the strictest pair exited, and put the wrong candidate first every time
    assert (fit.theta, fit.delta) == (NEVER, NEVER)
    assert (fit.exit_rate, fit.mean_layer, fit.agreement) == (0.0, 20, 1.0)
    ExitRule(fit.theta, fit.delta)  # a rule run --entropy-exit accepts
    assert calibrate_exit([[misleading_pass()]] * 4, target=0.0).missed is None  # a target met: no fallback


def test_eval_says_the_exit_target_was_missed_and_what_to_do(capsys):
    found = Thresholds(0.9, 0.1, 4, generator="synthetic:tiny-llama", verifier="self-judge on synthetic:tiny-llama")
    kept = eval_runs.Evaluation._with_entropy_exit(SimpleNamespace(lens_steps=[[misleading_pass()]] * 4), found, 0.9)
    out = capsys.readouterr().out
    assert "no threshold pair reached 90% agreement on 4 steps" in out and "agreed on 0%" in out
    assert "the exit does not fire" in out and "--target-agreement" in out
    assert (kept.entropy_theta, kept.entropy_delta, kept.entropy_agreement) == (NEVER, NEVER, 1.0)


def test_a_verifier_too_shallow_to_exit_still_saves_verify_skip(tmp_path, capsys, monkeypatch):
    """With a 2-layer PRM the eval ran every problem, then 'error: the verifier has too few layers' (exit 2), and the
    verify-skip thresholds it had just fitted were lost."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    save_thresholds(SAVED)
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    argv = ["eval", str(problems), *TINY, "--verifier", "prm", "--verifier-model", "synthetic:tiny-math-shepherd",
            "--calibrate", "--no-save"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "verify-skip thresholds: tau_conf" in out
    assert "entropy exit: not calibrated (the verifier has too few layers to exit early (2; it needs at least 3))" \
        in out and "self-judge on synthetic:tiny-llama are kept" in out, out
    saved = load_thresholds()
    assert saved.verifier == "prm synthetic:tiny-math-shepherd" and saved.steps > 0
    assert (saved.entropy_theta, saved.entropy_verifier) == (3.5, "self-judge on synthetic:tiny-llama")


@pytest.mark.parametrize(("given", "said"), [
    (["--calibrate", "--verify-skip", "--tau-conf", "0.5", "--r-gap", "0.1", "--audit-early-exit"],
     "--calibrate runs the verifier on every step and at every layer, so --verify-skip and --audit-early-exit"),
    (["--calibrate", "--verifier", "self-judge", "--entropy-exit", "--entropy-theta", "8", "--entropy-delta", "3"],
     "so --entropy-exit would do nothing"),
    (["--lookahead", "1", "--compare", "dvts,greedy"],
     "--lookahead works with the beam method only, and --compare dvts,greedy runs none"),
])  # fmt: skip
def test_options_the_eval_dropped_unsaid_are_refused(tmp_path, capsys, monkeypatch, given, said):
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    assert main(["eval", str(problems), *TINY, "--no-save", *given]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert load_thresholds() is None


def test_lookahead_beside_beam_in_a_comparison_is_taken():
    from app.eval_cli import _refuse_unused

    _refuse_unused(build_parser().parse_args(["eval", "p.jsonl", "--lookahead", "1", "--compare", "beam,dvts"]))


def test_an_interrupted_calibration_keeps_the_saved_thresholds(tmp_path, capsys, monkeypatch):
    """Ctrl+C exited 130 and replaced the calibration with one fitted to the problems that had finished."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    save_thresholds(SAVED)
    before = thresholds_path().read_text()
    real, calls = eval_runs.Evaluation._search, []

    def search(self, problem, method, config):
        calls.append(problem.line)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, problem, method, config)

    monkeypatch.setattr(eval_runs.Evaluation, "_search", search)
    problems = write(tmp_path, *[f'{{"question": "What is {i}+1?", "answer": "{i + 1}"}}' for i in range(3)])
    assert main(["eval", str(problems), *TINY, "--calibrate", "--no-save"]) == 130
    out, err = capsys.readouterr()
    assert "1 of 3 problems" in out and "verify-skip thresholds" not in out
    assert f"the calibration was interrupted, so it saved nothing (the thresholds in {thresholds_path()} are kept)" \
        in err, err
    assert thresholds_path().read_text() == before


def result(status: str, correct: bool = False) -> ProblemResult:
    finished = status == "finished"
    return ProblemResult("beam", 1, "5", "5" if correct else None, correct, correct, 2 if finished else 0, 10, 0,
                         0.1, 2, 0, 0, 0, status, ExitTally())


def test_failed_runs_are_not_wrong_answers():
    """Every run failed: 'accuracy 0.0%', 'pass@N 0.0% (N=0)' and "accuracy": 0.0, against the README's '-'."""
    failed = summarize("beam", [result("failed"), result("failed")], 1.0)
    assert (failed.accuracy, failed.pass_at_n, failed.failed) == (None, None, 2)
    rows = dict(re.split(r"\s{2,}", line) for line in table([failed]).splitlines()[1:])
    assert (rows["accuracy"], rows["pass@N"], rows["failed runs"]) == ("-", "-", "2")
    some = summarize("beam", [result("finished", correct=True), result("failed")], 1.0)
    assert (some.accuracy, some.pass_at_n, some.failed) == (1.0, 1.0, 1)


def test_an_eval_whose_every_run_failed_writes_null_accuracy(tmp_path, capsys):
    out_json = tmp_path / "r.json"
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    assert main(["eval", str(problems), *TINY, "--kv-budget", "1KB", "--no-save", "--json", str(out_json)]) == 2
    method = json.loads(out_json.read_text())["methods"][0]
    assert (method["accuracy"], method["pass_at_n"], method["failed"]) == (None, None, 1)


@pytest.mark.parametrize(("text", "said"), [
    ("garbage", "is damaged (Expecting value"),
    ('{"tau_conf": "x", "r_gap": 0.1}', 'is damaged (tau_conf is "x", not a number)'),
    ('{"tau_conf": 3, "r_gap": 0.1}', "is damaged (thresholds out of range: tau_conf 3 must be in (0, 1]"),
    ('{"r_gap": 0.1}', "is damaged (no tau_conf)"),
])  # fmt: skip
def test_a_damaged_thresholds_file_is_said_once_where_a_run_would_use_it(tmp_path, capsys, monkeypatch, text, said):
    """run --verify-skip ran on the default thresholds and said nothing of the file."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    thresholds_path().write_text(text)
    _, search, _ = configs_from_args(build_parser().parse_args(["run", "--verify-skip"]))
    assert (search.tau_conf, search.r_gap) == (SearchConfig().tau_conf, SearchConfig().r_gap)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert "run beamwise eval --calibrate again" in err[0] and "default thresholds" in err[0]
    configs_from_args(build_parser().parse_args(["run"]))  # no early exit: the file is not read for it
    assert capsys.readouterr().err == ""


def test_the_entropy_exit_names_its_own_verifier_first(tmp_path, capsys, monkeypatch):
    """'calibrated θ 0.362, δ 0.121 (verifier prm synthetic:tiny-qwen-prm, ...; entropy exit on self-judge ...)'
    named the verify-skip calibration's verifier, not the one θ and δ came from."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path))
    save_thresholds(Thresholds(0.8, 0.2, 10, 0.3, 0.95, entropy_theta=0.362, entropy_delta=0.121,
                               generator="synthetic:tiny-llama", verifier="prm synthetic:tiny-qwen-prm",
                               entropy_verifier="self-judge on synthetic:tiny-llama"))
    argv = ["run", "--model", "synthetic:tiny-llama", "--verifier", "self-judge", "--entropy-exit"]
    configs_from_args(build_parser().parse_args(argv))
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "calibrated θ 0.362, δ 0.121 (verifier self-judge on synthetic:tiny-llama, kept when verify-skip was " \
        "calibrated on prm synthetic:tiny-qwen-prm)" in line, line


def test_the_verifiers_kv_refusals_do_not_call_every_verifier_a_prm():
    """A self-judge verifier was told '...or use a smaller PRM.'"""
    hints = [share_too_small(100, 1, 10, 1000).hint]
    with pytest.raises(Exception) as error:
        split_budget(100, None, 80, 80)
    hints.append(error.value.hint)
    for hint in hints:
        assert "a smaller PRM; with self-judge, a smaller model" in hint, hint
