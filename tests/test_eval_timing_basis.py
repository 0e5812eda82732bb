"""`beamwise eval --compare` times every method on the same basis: nothing loads inside the first method's time."""

from __future__ import annotations

import sys

import pytest

import engine
from app import eval_runs
from app.cli import main
from engine.verifiers import reading

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "3", "--max-steps", "1"]


def test_the_search_module_is_imported_before_the_first_methods_clock_starts(tmp_path, monkeypatch):
    """engine.search was first imported inside the first run's timed window: the first method listed was charged
    0.27 s (0.64 s on the bundled model) that no other method paid."""
    monkeypatch.delattr(engine, "search", raising=False)  # as in a fresh process: not imported yet (an earlier
    monkeypatch.delitem(sys.modules, "engine.search", raising=False)  # test's import is put back afterwards)
    imported: list[bool] = []
    clock = eval_runs.SearchClock

    def timed():
        imported.append("engine.search" in sys.modules)
        return clock()

    monkeypatch.setattr(eval_runs, "SearchClock", timed)
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"question": "What is 2+3?", "answer": "5"}\n')
    assert main(["eval", str(problems), *TINY, "--compare", "greedy,beam", "--no-save"]) == 0
    assert imported == [True, True], imported


@pytest.mark.parametrize("verifier", [["--verifier", "self-judge"],
                                      ["--verifier", "prm", "--verifier-model", "synthetic:tiny-rlhflow-prm"]])
def test_the_verifiers_reading_is_measured_before_the_first_methods_clock_starts(tmp_path, monkeypatch, verifier):
    """How the verifier reads the generator's tokens is measured once a process (0.3 s on the bundled model), and
    was measured in the first run's wall time before its own clock: the first method listed paid it alone."""
    said: list[str] = []
    measure, clock = reading.most_tokens_per_token, eval_runs.SearchClock

    def measured(*args):
        said.append("measure")
        return measure(*args)

    def timed():
        said.append("clock")
        return clock()

    monkeypatch.setattr(reading, "most_tokens_per_token", measured)
    monkeypatch.setattr(eval_runs, "SearchClock", timed)
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"question": "What is 2+3?", "answer": "5"}\n{"question": "What is 1+1?", "answer": "2"}\n')
    assert main(["eval", str(problems), *TINY, *verifier, "--compare", "greedy,beam", "--no-save"]) == 0
    assert said == ["measure"] + ["clock"] * 4, said
