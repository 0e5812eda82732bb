"""`beamwise eval`'s cost figures cover the runs accuracy covers: "mean tokens" averaged a failed run in at its 0 (or
partial) tokens while accuracy left it out, so a method failing half its problems looked twice as cheap."""

from __future__ import annotations

import json
import re

from app.cli import main
from app.eval_exit import ExitTally
from app.eval_report import ProblemResult, summarize, table
from tests.test_eval_cli import TINY, write


def result(status: str, tokens: int, verifier_tokens: int, steps: int = 2, skipped: int = 0) -> ProblemResult:
    finished = status == "finished"
    return ProblemResult("beam", 1, "5", "5" if finished else None, finished, finished, 2 if finished else 0,
                         tokens, verifier_tokens, 0.1, steps, skipped, 0, 0, status, ExitTally())


def rows(text: str) -> dict[str, str]:
    return dict(re.split(r"\s{2,}", line) for line in text.splitlines()[1:])


def test_mean_tokens_are_over_the_finished_runs_as_accuracy_is():
    summary = summarize("beam", [result("finished", 100, 40), result("failed", 0, 0), result("failed", 30, 8)], 2.0)
    assert (summary.accuracy, summary.failed) == (1.0, 2)
    assert (summary.mean_tokens, summary.mean_verifier_tokens) == (100, 40)  # was 43.3 and 16


def test_the_step_rates_are_over_the_finished_runs_steps_too():
    """A failed run's steps counted in the verify-skip rate while its answer did not count anywhere."""
    summary = summarize("beam", [result("finished", 100, 40, steps=4, skipped=1), result("failed", 9, 3, steps=4)], 1.0)
    assert summary.skip_rate == 0.25  # was 1 of 8


def test_with_no_finished_run_the_means_are_dashes_and_null():
    failed = summarize("beam", [result("failed", 12, 5), result("failed", 0, 0)], 1.0)
    assert (failed.mean_tokens, failed.mean_verifier_tokens, failed.seconds) == (None, None, 1.0)
    shown = rows(table([failed]))
    assert (shown["mean tokens"], shown["mean verifier tokens"], shown["wall seconds, all runs"]) == ("-", "-", "1.0")


def test_an_eval_whose_every_run_failed_writes_null_means(tmp_path, capsys):
    out_json = tmp_path / "r.json"
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    assert main(["eval", str(problems), *TINY, "--kv-budget", "1KB", "--no-save", "--json", str(out_json)]) == 2
    method = json.loads(out_json.read_text(encoding="utf-8"))["methods"][0]
    assert (method["mean_tokens"], method["mean_verifier_tokens"], method["failed"]) == (None, None, 1)
