"""`eval --json` over a file already there: Ctrl+C before the first problem finished replaced an earlier eval's
results with a report of nothing ("complete": false, 0 problems), against the README's "a file already there is
replaced only once this eval has its results"."""

from __future__ import annotations

import json

from app.cli import main
from tests.test_eval_cli import TINY, interrupt_search, three_problems


def test_ctrl_c_before_any_problem_finished_keeps_the_file_already_there(tmp_path, capsys, monkeypatch):
    interrupt_search(monkeypatch, at=1)
    out_json = tmp_path / "keep.json"
    out_json.write_text('{"earlier": true}', encoding="utf-8")
    assert main(["eval", str(three_problems(tmp_path)), *TINY, "--no-save", "--json", str(out_json)]) == 130
    captured = capsys.readouterr()
    assert json.loads(out_json.read_text(encoding="utf-8")) == {"earlier": True}
    assert f"no problem finished, so {out_json} was not written: the file already there is kept." in captured.err
    assert f"wrote {out_json}" not in captured.out and "0 of 3 problems" in captured.out


def test_ctrl_c_after_a_problem_finished_still_replaces_it_with_the_partial_results(tmp_path, capsys, monkeypatch):
    interrupt_search(monkeypatch, at=2)
    out_json = tmp_path / "keep.json"
    out_json.write_text('{"earlier": true}', encoding="utf-8")
    assert main(["eval", str(three_problems(tmp_path)), *TINY, "--no-save", "--json", str(out_json)]) == 130
    data = json.loads(out_json.read_text(encoding="utf-8"))
    assert data["complete"] is False and data["methods"][0]["problems"] == 1
    assert "was not written" not in capsys.readouterr().err
