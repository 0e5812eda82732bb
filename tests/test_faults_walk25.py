"""Rows of the README's faults table that a walkthrough found broken (session 25)."""

from __future__ import annotations

import pytest

from app.cli import main

NOT_UTF8 = "ab\udcffcd"  # how Python hands over an argument holding the byte 0xff
TINY = ["--model", "synthetic:tiny-llama"]


@pytest.mark.parametrize("command", [["gui", "--question", NOT_UTF8, "--screenshot", "shot.png"],
                                     ["bench", "--question", NOT_UTF8, "--plan-only"],
                                     ["bench", "--question", NOT_UTF8]])
def test_a_question_that_is_not_utf8_is_refused_by_gui_and_bench_as_by_run(command, tmp_path, monkeypatch,
                                                                           capsys) -> None:
    """`gui` recorded "abcd" (Qt dropped the byte) and `bench` ran, both exit 0."""
    monkeypatch.chdir(tmp_path)
    assert main([*command, *TINY]) == 2
    err = capsys.readouterr().err
    assert "the question has bytes that are not UTF-8 text (at character 2); write it as UTF-8." in err, err
    assert "--question-file" not in err  # neither command takes one
    assert not (tmp_path / "shot.png").exists()


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_exporting_over_the_database_is_refused_as_such_first(tmp_path, capsys, force) -> None:
    """Without --force it said "already exists ... Add --force to replace it", which --force then refused."""
    db = tmp_path / "s.db"
    assert main(["run", "hi", *TINY, "--max-steps", "1", "--step-tokens", "2", "--db", str(db)]) == 0
    capsys.readouterr()
    before = db.read_bytes()
    assert main(["sessions", "export", "1", "--db", str(db), "-o", str(db), *force]) == 2
    err = capsys.readouterr().err
    assert "it is the session database itself; nothing was written" in err and "--force" not in err, err
    assert db.read_bytes() == before
