"""`beamwise run --json` quit by Ctrl+C: the stream still ends with exactly one run_cancelled line (README, "JSON
Lines": the last line is always run_finished, run_failed or run_cancelled). Before, a second Ctrl+C mid-step left
step_started the last line, and a Ctrl+C before the run started (the model's load) printed no JSON at all."""

from __future__ import annotations

import json

from app.cli import main

TINY = ["--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--step-tokens", "4", "--max-steps", "2"]


def _types(capsys) -> list[str]:
    return [json.loads(line)["type"] for line in capsys.readouterr().out.splitlines()]


def test_a_second_ctrl_c_mid_step_ends_the_stream_with_run_cancelled(capsys, monkeypatch) -> None:
    from engine.search import run

    def quit_in_step_2(*args, **kwargs):
        for event in run(*args, **kwargs):
            yield event
            if event.type == "step_started" and event.step == 2:
                raise KeyboardInterrupt  # the second Ctrl+C, raised by the signal handler mid-step

    monkeypatch.setattr("engine.search.run", quit_in_step_2)
    assert main(["run", "What is 2+3?", *TINY, "--no-save", "--json"]) == 130
    types = _types(capsys)
    assert types[0] == "run_started" and types[-2] == "step_started", types
    assert types[-1] == "run_cancelled" and types.count("run_cancelled") == 1


def test_ctrl_c_while_the_model_loads_is_one_run_cancelled_line(capsys, monkeypatch) -> None:
    def interrupted_load(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("engine.models.load_model", interrupted_load)
    assert main(["run", "What is 2+3?", *TINY, "--no-save", "--json"]) == 130
    out = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in out] == [{"type": "run_cancelled", "step": 0}]


def test_ctrl_c_before_the_run_without_json_prints_no_json(capsys, monkeypatch) -> None:
    monkeypatch.setattr("engine.models.load_model", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    assert main(["run", "What is 2+3?", *TINY, "--no-save"]) == 130
    assert capsys.readouterr().out == ""



def test_a_second_ctrl_c_of_a_recorded_run_ends_with_its_recorded_line(capsys, monkeypatch, tmp_path) -> None:
    """The second Ctrl+C said "recorded as session 1, cancelled after step 1", then "beamwise: interrupted" after it:
    the line that says what was kept is now the last (README: every fault ends with one line on stderr)."""
    from engine.search import run

    def quit_in_step_2(*args, **kwargs):
        for event in run(*args, **kwargs):
            yield event
            if event.type == "step_started" and event.step == 2:
                raise KeyboardInterrupt

    monkeypatch.setattr("engine.search.run", quit_in_step_2)
    assert main(["run", "What is 2+3?", *TINY, "--db", str(tmp_path / "s.db")]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "beamwise: recorded as session 1, cancelled after step 1", err
    assert "beamwise: interrupted" not in err
