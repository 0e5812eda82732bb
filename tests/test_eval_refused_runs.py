"""A run refused before it starts (a question past the model's context) is recorded nowhere, by `run` as by `eval`;
the eval says so on the run's line and before its table, where it said only 'failed' and each run looked saved."""

from __future__ import annotations

import json

from app.cli import main
from app.store import SessionStore

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "3", "--max-steps", "1"]
LONG = "word " * 1000  # past synthetic:tiny-llama's 2,048-token context


def sessions(db) -> list[str]:
    with SessionStore(db) as store:
        return [s["title"] for s in store.list_sessions()]


def test_a_question_past_the_context_is_said_not_saved_as_run_saves_none(tmp_path, capsys):
    db = tmp_path / "s.db"
    assert main(["run", LONG, *TINY, "--db", str(db)]) == 2
    assert not db.exists() or sessions(db) == []  # `run` records no run that failed before it started
    capsys.readouterr()
    problems = tmp_path / "p.jsonl"
    problems.write_text("".join(json.dumps(row) + "\n" for row in (
        {"question": "What is 2+3?", "answer": "5"}, {"question": LONG, "answer": "1"})))
    assert main(["eval", str(problems), *TINY, "--compare", "greedy,beam", "--db", str(db)]) == 0
    err = capsys.readouterr().err.splitlines()
    lines = [line for line in err if line.startswith("[eval] 2/2")]
    assert len(lines) == 2 and all(": refused before it started, so not saved: The prompt is " in line
                                   for line in lines), lines
    (said,) = [line for line in err if "refused before they started" in line]
    assert said.startswith("beamwise: 2 run(s) were refused before they started (line 2 greedy, line 2 beam;"), said
    assert sorted(sessions(db)) == ["eval beam line 1: What is 2+3?", "eval greedy line 1: What is 2+3?"]


def test_a_run_that_failed_after_it_started_is_saved_and_said_failed_as_before(tmp_path, capsys):
    db = tmp_path / "s.db"
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"question": "What is 2+3?", "answer": "5"}\n')
    main(["eval", str(problems), *TINY, "--policy", "lbs", "--kv-budget", "10KB", "--db", str(db)])
    err = capsys.readouterr().err
    assert "[eval] 1/1 beam: failed: KV budget 10.0 kB is too small" in err and "refused" not in err, err
    with SessionStore(db) as store:
        assert [s["status"] for s in store.list_sessions()] == ["failed"]


def test_without_saving_a_refused_run_is_said_failed_alone(tmp_path, capsys):
    problems = tmp_path / "p.jsonl"
    problems.write_text(json.dumps({"question": LONG, "answer": "1"}) + "\n")
    main(["eval", str(problems), *TINY, "--no-save"])
    err = capsys.readouterr().err
    assert "[eval] 1/1 beam: failed: The prompt is " in err and "not saved" not in err, err
