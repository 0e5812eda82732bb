"""A follow-up without --model ran on the bundled model after a turn on another, unsaid: it now says which model
the turn it follows ran on, and the option that goes on with it. One on the same model says nothing of it."""

from __future__ import annotations

from app.cli import main

TINY = ["--model", "synthetic:tiny-llama", "--max-steps", "1", "--step-tokens", "4", "--beams", "1", "--width", "1"]


def test_a_follow_up_on_another_model_says_so_and_how_to_go_on(tmp_path, capsys) -> None:
    db = str(tmp_path / "s.db")
    assert main(["run", "What is 2+3?", "--db", db, *TINY]) == 0
    capsys.readouterr()
    assert main(["run", "--session", "1", "And 3+4?", "--db", db, *TINY]) == 0
    assert "ran on" not in capsys.readouterr().err  # the same model: nothing to say
    assert main(["run", "--session", "2", "And 4+5?", "--db", db, "--model", "synthetic:tiny-qwen2",
                 "--max-steps", "1", "--step-tokens", "4", "--beams", "1", "--width", "1"]) == 0
    err = capsys.readouterr().err
    assert ("session 2 ran on synthetic:tiny-llama (random weights); this follow-up runs on synthetic:tiny-qwen2 "
            "(add --model synthetic:tiny-llama to go on with it).") in err, err


def test_a_turn_on_a_folder_no_longer_listed_names_no_option(tmp_path) -> None:
    from app.follow_up import model_switch

    assert model_switch(3, "my-model", str(tmp_path / "my-model")) is None  # the same folder, by its path
    said = model_switch(3, "gone-model", "bundled")
    assert said == ("session 3 ran on gone-model; this follow-up runs on the bundled model (to go on with it, "
                    "give its path as --model).")
    assert model_switch(3, "SmolLM2-135M-Instruct (bundled)", "bundled") is None
    assert model_switch(3, None, "bundled") is None
