"""What the model commands and the Models tab say: a mistyped `bundled` gets a guess as a mistyped listed name does,
`models remove` of an added folder says how to undo it (it asks nothing: no file is touched), and Add folder… of a
folder listed already says so instead of "Added"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app import model_library as lib
from app.cli import main

pytestmark = pytest.mark.usefixtures("scratch_models")
ROOT = Path(__file__).resolve().parents[1]
RUN = ["--beams", "1", "--width", "1", "--max-steps", "1", "--step-tokens", "2", "--no-save"]


@pytest.mark.parametrize("typo", ["bundle", "bundeld", "Bundled", "BUNDLED"])
@pytest.mark.parametrize("command", [["run", "hi", *RUN], ["eval", str(ROOT / "resources/problems/gsm-mini.jsonl")],
                                     ["models", "info"]])
def test_a_mistyped_bundled_gets_a_guess(capsys, command, typo):
    """`--model bundle` said "model path bundle does not exist" and `models info bundle` listed the names but not
    the keyword, where `--model SmolLM2-135M` got "did you mean SmolLM2-135M-Instruct?"."""
    argv = [*command, typo] if command[0] == "models" else [*command, "--model", typo]
    assert main(argv) == 2
    said = capsys.readouterr().err
    assert "did you mean bundled?" in said and "does not exist" not in said


def test_a_mistyped_default_gets_a_guess_and_a_listed_name_still_wins(capsys):
    assert main(["run", "hi", "--model", "defualt", *RUN]) == 2
    assert "did you mean default?" in capsys.readouterr().err
    assert main(["run", "hi", "--model", "smollm2-135m", *RUN]) == 2
    assert "did you mean SmolLM2-135M-Instruct?" in capsys.readouterr().err
    assert main(["run", "hi", "--model", "nothing-like-it", *RUN]) == 2
    assert "did you mean" not in capsys.readouterr().err


def test_taking_an_added_folder_off_the_list_says_how_to_undo_it(tinyllama_folder, capsys):
    """No terminal, no --yes: it is taken off the list without a question (nothing is deleted), and the line says
    the command that lists it again; the help says which removal asks."""
    assert main(["models", "add", str(tinyllama_folder)]) == 0
    capsys.readouterr()
    assert main(["models", "remove", str(tinyllama_folder.resolve())]) == 0
    said = capsys.readouterr().out
    assert "off the list; its files were not touched" in said
    assert f"`beamwise models add {tinyllama_folder.resolve()}` lists it again" in said
    assert json.loads(lib.added_list_path().read_text(encoding="utf-8")) == []
    assert (tinyllama_folder / "config.json").is_file()
    assert main(["models", "add", str(tinyllama_folder)]) == 0 and lib.added_folders() == [tinyllama_folder.resolve()]
    with pytest.raises(SystemExit):
        main(["models", "--help"])
    assert "after asking" in capsys.readouterr().out


def test_add_folder_of_a_listed_folder_says_it_is_listed_already(qtbot, tinyllama_folder):
    """The Models tab said "Added X." though nothing changed; `models add` says it is listed already."""
    from app.gui.models_page import ModelsPage

    page = ModelsPage(confirm=lambda title, text: False)
    qtbot.addWidget(page)
    qtbot.waitUntil(lambda: not page.listing, timeout=30000)
    assert page.add_folder(tinyllama_folder) is True
    assert page.folder_status.text() == f"Added {tinyllama_folder.resolve()}."
    qtbot.waitUntil(lambda: not page.listing, timeout=30000)
    assert page.add_folder(tinyllama_folder) is True
    said = page.folder_status.text()
    assert said == lib.listed_already(tinyllama_folder) and "is listed already (as tinyllama)" in said
    assert not said.startswith("Added")
    assert lib.added_folders() == [tinyllama_folder.resolve()]
    qtbot.waitUntil(lambda: not page.listing, timeout=30000)
    assert page.selected() is not None and page.selected().source == str(tinyllama_folder.resolve())
