"""`eval --json` at both ends: a path lost while the problems ran costs the JSON alone, not the calibration; a
failed run's row says why; Ctrl+C before the model loaded keeps the file already there, and says so."""

from __future__ import annotations

import json
import shutil

from app import eval_cli, eval_runs
from app.cli import main
from app.early_exit import load_thresholds
from tests.test_eval_cli import TINY, write

LONG = "word " * 1000  # past synthetic:tiny-llama's 2,048-token context


def test_a_json_path_lost_while_the_problems_ran_keeps_the_calibration(tmp_path, capsys, monkeypatch):
    """The JSON was written first: its error (exit 2) came before the thresholds were saved, and they were lost."""
    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    folder = tmp_path / "results"
    folder.mkdir()
    real = eval_runs.Evaluation.run

    def run_then_lose_the_folder(self, problems):
        real(self, problems)
        shutil.rmtree(folder)
        folder.write_text("a file now", encoding="utf-8")  # a removed folder is made again: this one cannot be

    monkeypatch.setattr(eval_runs.Evaluation, "run", run_then_lose_the_folder)
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    assert main(["eval", str(problems), *TINY, "--no-save", "--calibrate", "--json", str(folder / "r.json")]) == 2
    out, err = capsys.readouterr()
    assert load_thresholds() is not None and "verify-skip thresholds:" in out and "saved to" in out
    assert err.strip().splitlines()[-1] == (f"beamwise: error: cannot write {folder / 'r.json'}: {folder} is a file, "
                                            "not a folder; pick a writable --json path."), err


def test_thresholds_that_cannot_be_saved_and_a_json_that_cannot_be_written_are_both_said(tmp_path, capsys,
                                                                                         monkeypatch):
    """The JSON's error, raised in a `finally`, replaced the thresholds' own."""
    from engine.errors import BeamwiseError

    monkeypatch.setenv("BEAMWISE_CONFIG_DIR", str(tmp_path / "config"))
    folder = tmp_path / "results"
    folder.mkdir()

    def cannot_save(self, target):
        shutil.rmtree(folder)
        folder.write_text("a file now", encoding="utf-8")
        raise BeamwiseError("the thresholds could not be saved (test).")

    monkeypatch.setattr(eval_runs.Evaluation, "save_calibration", cannot_save)
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    assert main(["eval", str(problems), *TINY, "--no-save", "--calibrate", "--json", str(folder / "r.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-2].startswith(f"beamwise: error: cannot write {folder / 'r.json'}")
    assert err[-1] == "beamwise: error: the thresholds could not be saved (test)."


def test_a_failed_runs_row_says_why_and_is_left_out_of_accuracy(tmp_path, capsys):
    """The row read {"status": "failed", "correct": false} with the reason only on stderr."""
    problems = tmp_path / "p.jsonl"
    problems.write_text("".join(json.dumps(row) + "\n" for row in (
        {"question": "What is 2+3?", "answer": "5"}, {"question": LONG, "answer": "1"})), encoding="utf-8")
    out_json = tmp_path / "r.json"
    assert main(["eval", str(problems), *TINY, "--no-save", "--json", str(out_json)]) == 0
    (said,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[eval] 2/2")]
    data = json.loads(out_json.read_text(encoding="utf-8"))
    finished, failed = data["runs"]
    assert finished["status"] == "finished" and finished["error"] is None
    assert failed["status"] == "failed" and failed["error"] and said.endswith(failed["error"]), (said, failed)
    method = data["methods"][0]
    assert method["failed"] == 1 and method["accuracy"] == float(finished["correct"])  # over the finished run


def test_ctrl_c_before_the_model_loaded_keeps_the_json_file_and_says_so(tmp_path, capsys, monkeypatch):
    """It printed only "beamwise: interrupted": the README promises the file is kept, and said."""
    out_json = tmp_path / "keep.json"
    out_json.write_text('{"earlier": true}', encoding="utf-8")

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(eval_cli, "load_problems", interrupted)
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    assert main(["eval", str(problems), *TINY, "--no-save", "--json", str(out_json)]) == 130
    assert capsys.readouterr().err.splitlines() == [
        f"beamwise: no problem finished, so {out_json} was not written: the file already there is kept.",
        "beamwise: interrupted"]
    assert json.loads(out_json.read_text(encoding="utf-8")) == {"earlier": True}


def test_with_a_limit_a_large_file_is_not_said_to_be_read_whole(tmp_path, capsys, monkeypatch):
    """`--limit 2` read 2 lines, and said "reading 9.4 MB of problems"."""
    path = write(tmp_path, *['{"question": "What is 2+3?", "answer": "5"}'] * 50)
    monkeypatch.setattr(eval_cli, "LARGE_PROBLEMS", path.stat().st_size - 1)
    assert main(["eval", str(path), *TINY, "--no-save", "--limit", "1"]) == 0
    assert "of problems from" not in capsys.readouterr().err


def test_an_eval_with_no_problem_finished_shows_no_rate_and_no_seconds(tmp_path, capsys, monkeypatch):
    """"verify-skip rate 0.0%" and "wall seconds 0.0" stood beside accuracy "-"."""
    from tests.test_eval_cli import interrupt_search

    interrupt_search(monkeypatch, at=1)
    problems = write(tmp_path, '{"question": "What is 2+3?", "answer": "5"}')
    assert main(["eval", str(problems), *TINY, "--no-save", "--verify-skip"]) == 130
    rows = dict(line.rsplit(None, 1) for line in capsys.readouterr().out.splitlines() if line.startswith(("verify",
                                                                                                          "wall")))
    assert rows == {"wall seconds, all runs": "-", "verify-skip rate": "-"}, rows
