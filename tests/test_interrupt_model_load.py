"""Ctrl+C while the model loads ends `run` with one line on stderr, the one that says nothing was recorded, and
status 130: "beamwise: interrupted" followed it (README: every fault ends with one line on stderr)."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from app.store import SessionStore

RUN = ["run", "Explain.", "--model", "synthetic:tiny-llama", "--beams", "2", "--width", "2", "--max-steps", "1",
       "--step-tokens", "16"]
SAID = "beamwise: interrupted while the model loaded, before the search began: nothing was recorded"


@pytest.fixture
def ctrl_c_in_the_load(monkeypatch):
    def load_model(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("engine.models.load_model", load_model)


@pytest.mark.parametrize("json_lines", [False, True], ids=["text", "json"])
def test_ctrl_c_while_the_model_loads_is_one_line(tmp_path, capsys, ctrl_c_in_the_load, json_lines):
    db = tmp_path / "s.db"
    assert main([*RUN, "--db", str(db), *(["--json"] if json_lines else [])]) == 130
    out, err = capsys.readouterr()
    assert [line for line in err.splitlines() if line.startswith("beamwise:")] == [SAID], err
    assert [json.loads(line) for line in out.splitlines()] == ([{"type": "run_cancelled", "step": 0}]
                                                               if json_lines else [])
    if db.exists():
        with SessionStore(db) as store:
            assert store.list_sessions() == []
