"""`beamwise run --audit-early-exit` in text: each audited step says whether the full pass would have put the same
child first, the totals count the disagreements (README: the audit reports how often it would have put another
child first), and the entropy exit's "work saved" says that the audit's full pass is counted (it read 0% unsaid).
Before, the text output printed nothing of the audit."""

from __future__ import annotations

import re

import pytest

from app.cli import main

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "2",
        "--no-save", "--threads", "1"]
EXITS = {  # thresholds that fire on random weights (a candidate's confidence ~0.003; the lens entropy is high)
    "verify-skip": ["--verify-skip", "--tau-conf", "0.0001", "--r-gap", "0"],
    "entropy-exit": ["--verifier", "self-judge", "--entropy-exit", "--entropy-theta", "100", "--entropy-delta", "100"],
}


@pytest.mark.parametrize("exit_kind", list(EXITS))
def test_the_audit_is_printed_per_step_and_in_the_totals(capsys, exit_kind: str) -> None:
    assert main(["run", "What is 2+3?", *TINY, *EXITS[exit_kind], "--audit-early-exit"]) == 0
    out = capsys.readouterr().out
    steps = re.findall(r"; audit: (?:the verifier|the full pass) puts (the same|another) child first", out)
    assert steps, out
    (total,) = re.findall(r"audit: the early exit put another child first in (\d+) of (\d+) audited step", out)
    assert total == (str(steps.count("another")), str(len(steps)))
    if exit_kind == "entropy-exit":
        assert "of the verifier's layer work saved (the audit's full pass counted)" in out


def test_without_the_audit_nothing_of_it_is_printed(capsys) -> None:
    assert main(["run", "What is 2+3?", *TINY, *EXITS["verify-skip"]]) == 0
    out = capsys.readouterr().out
    assert "verifier skipped" in out and "audit" not in out
