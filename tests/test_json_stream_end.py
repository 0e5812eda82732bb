"""`beamwise run --json`: every stream ends with its end event, and a run that fails before it starts is that
run_failed alone, wherever it failed (README, "JSON Lines"). Before, a failure the engine met (a question too
long for the model) was a lone run_failed line, while one before the engine (a model that does not load, the
memory check's refusal, an unknown --session) printed nothing on stdout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "2"]


def stream(capsys) -> tuple[list[dict], str]:
    captured = capsys.readouterr()
    return [json.loads(line) for line in captured.out.splitlines()], captured.err


@pytest.mark.parametrize("where", ["engine", "model load", "memory check", "session"])
def test_a_run_that_fails_before_it_starts_is_one_run_failed_line(capsys, monkeypatch, tmp_path: Path,
                                                                  where: str) -> None:
    question, options = "What is 2+3?", [*TINY, "--no-save"]
    if where == "engine":
        question = "word " * 3000  # the engine's check: longer than the model's context
    elif where == "model load":
        options = [*options, "--model", str(tmp_path / "no-such-model")]
    elif where == "memory check":
        monkeypatch.setattr("app.preflight.free_memory_bytes", lambda device: 1000)  # SearchTooLarge
    else:
        options = [*TINY, "--session", "7", "--db", str(tmp_path / "none.db")]
    assert main(["run", question, *options, "--json"]) == 2
    events, err = stream(capsys)
    assert [e["type"] for e in events] == ["run_failed"], events
    (error_line,) = [line for line in err.splitlines() if line.startswith("beamwise: error: ")]
    assert error_line == f"beamwise: error: {events[0]['message']}"  # the same words on both


def test_a_run_that_started_begins_with_run_started_and_ends_with_its_end(capsys) -> None:
    assert main(["run", "What is 2+3?", *TINY, "--no-save", "--json"]) == 0
    events, _ = stream(capsys)
    assert events[0]["type"] == "run_started" and events[-1]["type"] == "run_finished"
    assert [e["type"] for e in events].count("run_started") == 1


def test_a_bad_threads_count_ends_the_json_stream_too(capsys):
    """--threads is checked before the run's handler: its refusal printed no JSON though the README says every
    run --json stream ends with its end event (only the parser's refusals print none)."""
    from app.cli import main

    assert main(["run", "hi", "--json", "--threads", "0", "--model", "synthetic:tiny-llama", "--no-save"]) == 2
    out, err = capsys.readouterr()
    (line,) = out.splitlines()
    assert json.loads(line)["type"] == "run_failed" and "--threads" in json.loads(line)["message"]
    assert "--threads" in err
