"""A model folder with no tokenizer is listed with the problem `models add` and `run` refuse it for, and `models
add` of a path that is not there says what `add` takes (not the advice for --model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import model_library as lib
from app.cli import main
from engine.errors import ModelLoadError
from engine.models import LoadedModel

pytestmark = pytest.mark.usefixtures("scratch_models")
NO_TOKENIZER = "has no tokenizer (no tokenizer.json, tokenizer.model"


@pytest.fixture
def weights_alone(tiny: LoadedModel) -> Path:
    """config.json and whole weights, as `save_pretrained` of a model alone leaves them."""
    folder = lib.models_dir() / "weights-alone"
    tiny.model.save_pretrained(folder)
    return folder


def test_a_folder_without_a_tokenizer_is_a_problem_row_and_info_exits_2(weights_alone, capsys):
    """It was listed as a working generator (info exited 0), while `models add` and `run` refused it."""
    assert NO_TOKENIZER in lib.find("weights-alone").problem
    assert main(["models", "list"]) == 0
    assert f"problem: model folder {weights_alone} {NO_TOKENIZER}" in capsys.readouterr().out
    for target in ("weights-alone", str(weights_alone)):
        assert main(["models", "info", target]) == 2
        assert NO_TOKENIZER in capsys.readouterr().out
    assert "weights-alone" not in {e.name for e in lib.list_models() if not e.problem}


def test_a_folder_with_its_tokenizer_has_no_problem(weights_alone, tiny):
    tiny.tokenizer.save_pretrained(weights_alone)
    assert lib.find("weights-alone").problem == ""


@pytest.mark.parametrize("name", ["missing", "missing.gguf"])
def test_adding_a_path_that_is_not_there_says_what_add_takes(tmp_path, capsys, name):
    assert main(["models", "add", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert "does not exist. Give the path of an existing model folder" in err and ".gguf file" in err
    assert "Pick the bundled model" not in err and "synthetic:NAME" not in err
    assert ModelLoadError.hint.startswith("Pick the bundled model")  # --model keeps its own advice
    assert lib.added_folders() == []
